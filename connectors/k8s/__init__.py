"""Kubernetes connector: slimming raw API objects into typed events, offline ingest."""
