"""A gpuworker on a machine with GPUs (the fake NVML's): one slot per GPU, each heartbeat carrying the
GPU's utilisation and memory in use."""

import subprocess
from pathlib import Path

import pytest

from jobs.models import Gpu
from tests.support import manage, process_env, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_its_heartbeats_carry_each_gpus_utilisation_and_memory(redis_server):
    env = process_env(E31_NVML_MODULE="tests.fakes.fake_nvml", E31_FAKE_GPUS="2", E31_FAKE_UTILISATION="35")
    worker = subprocess.Popen(manage("gpuworker", "--name", "fake-gpus", "--no-control"), env=env)
    try:
        wait_for(
            lambda: list(Gpu.objects.filter(node__name="fake-gpus").order_by("index").values_list(
                "kind", "utilisation", "memory_used_mb"
            )) == [("gpu", 35, 0), ("gpu", 45, 1024)],
            timeout=60,
            what="both GPUs' readings",
        )  # fmt: skip
        assert sorted(slot_devices(worker.pid).items()) == [
            ("slot0@fake-gpus", "GPU-00000000-0000-0000-0000-000000000000"),
            ("slot1@fake-gpus", "GPU-00000000-0000-0000-0000-000000000001"),
        ], "each slot sees its own GPU, named by its UUID"
    finally:
        # A slot's worker stopped before it finished starting may take its full stop timeout (15 s) and be
        # killed: the gpuworker is given time for both of its slots before the test fails.
        worker.send_signal(2)
        worker.wait(60)
    assert not Gpu.objects.online().filter(node__name="fake-gpus").exists(), "offline once stopped"


def slot_devices(gpuworker: int) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES of each slot worker the gpuworker started, by the worker's name."""
    found = {}
    for child in Path(f"/proc/{gpuworker}/task/{gpuworker}/children").read_text().split():
        command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        lines = Path(f"/proc/{child}/environ").read_bytes().decode().split("\0")
        environment = dict(line.split("=", 1) for line in lines if "=" in line)
        name = command[command.index(b"--hostname") + 1].decode() if b"--hostname" in command else ""
        if name.startswith("slot"):
            found[name] = environment["CUDA_VISIBLE_DEVICES"]
    return found
