"""Benchmarks: a deterministic event-stream generator and the core benchmark."""
