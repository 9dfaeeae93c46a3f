"""NVML, reached only through this module: the module named by E31_NVML_MODULE (pynvml from
nvidia-ml-py by default; a fake NVML in the tests) answers every question about the GPUs."""

import importlib
from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    memory_mb: int
    compute_capability: str
    driver: str


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def discover() -> list[GpuInfo]:
    """The GPUs of this machine; none when there is no NVIDIA driver."""
    nvml = importlib.import_module(settings.E31_NVML_MODULE)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return []
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            found.append(
                GpuInfo(
                    index=index,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    memory_mb=nvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024),
                    compute_capability=f"{major}.{minor}",
                    driver=driver,
                )
            )
        return found
    finally:
        nvml.nvmlShutdown()


@dataclass(frozen=True)
class Reading:
    """One GPU at one heartbeat: how busy it is, and the memory in use."""

    index: int
    utilisation: int  # percent of the last sample period the GPU was running a kernel
    memory_used_mb: int


def readings() -> dict[int, Reading]:
    """Each GPU's utilisation and memory now, by index; nothing when NVML cannot answer."""
    nvml = importlib.import_module(settings.E31_NVML_MODULE)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return {}
    try:
        found = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            found[index] = Reading(
                index=index,
                utilisation=int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                memory_used_mb=nvml.nvmlDeviceGetMemoryInfo(handle).used // (1024 * 1024),
            )
        return found
    except nvml.NVMLError:
        return {}
    finally:
        nvml.nvmlShutdown()
