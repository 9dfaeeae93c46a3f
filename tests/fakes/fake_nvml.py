"""A fake NVML with the calls jobs.workers.nvml makes, for machines without GPUs.

E31_FAKE_GPUS says how many GPUs it has (default 8); 0 behaves like a machine with no driver.
"""

import os
from types import SimpleNamespace


class NVMLError(Exception):
    pass


def _count() -> int:
    return int(os.environ.get("E31_FAKE_GPUS", "8"))


def nvmlInit():
    if _count() == 0:
        raise NVMLError("NVML Shared Library Not Found")


def nvmlShutdown():
    return None


def nvmlSystemGetDriverVersion():
    return "550.54.15"


def nvmlDeviceGetCount():
    return _count()


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < _count():
        raise NVMLError("Invalid Argument")
    return index


def nvmlDeviceGetName(handle):
    return "NVIDIA H100 80GB HBM3"


def nvmlDeviceGetUUID(handle):
    return f"GPU-00000000-0000-0000-0000-{handle:012d}"


def nvmlDeviceGetMemoryInfo(handle):
    return SimpleNamespace(total=80 * 1024**3, used=1024**3 * handle, free=80 * 1024**3 - 1024**3 * handle)


def nvmlDeviceGetCudaComputeCapability(handle):
    return (9, 0)


def nvmlDeviceGetUtilizationRates(handle):
    """GPU n is busy 10 × n percent of the time (E31_FAKE_UTILISATION adds to it, up to 100)."""
    busy = min(100, 10 * handle + int(os.environ.get("E31_FAKE_UTILISATION", "0")))
    return SimpleNamespace(gpu=busy, memory=busy // 2)
