"""A gpuworker on a machine with GPUs (the fake NVML's): one slot per GPU, each heartbeat carrying the
GPU's utilisation and memory in use."""

import subprocess

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
    finally:
        worker.send_signal(2)
        worker.wait(30)
    assert not Gpu.objects.online().filter(node__name="fake-gpus").exists(), "offline once stopped"
