"""NVML: the GPU map (bus id <-> uuid <-> index) and XID critical-error events (with a driver)."""
