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
