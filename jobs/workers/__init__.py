"""The worker side: NVML discovery, the gpuworker supervisor, and the loop each held slot runs."""
