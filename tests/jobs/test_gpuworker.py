"""`manage.py gpuworker`: slots registered and kept alive, a dead worker restarted, and nothing left
running after it is stopped."""

import os
import signal
from pathlib import Path

import pytest

from jobs.models import Gpu
from tests.conftest import Worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def processes_mentioning(text: str) -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in command:
            found[int(entry.name)] = command
    return found


def main_process_of(slot: str) -> int | None:
    """The slot's Celery main process: the oldest of the processes that name it (its pool is younger)."""
    pids = [pid for pid, command in processes_mentioning(slot).items() if "celery" in command]
    return min(pids) if pids else None


@pytest.fixture
def worker(django_db_setup, redis_server, transactional_db):
    worker = Worker(f"gpuworker-test-{os.getpid()}", slots=1)
    yield worker
    if worker.process.poll() is None:
        worker.stop()


def test_it_registers_its_slots_restarts_a_dead_worker_and_leaves_nothing_behind(worker):
    wait_for(lambda: Gpu.objects.online().filter(node__name=worker.name).count() == 1, timeout=60)
    slot = f"slot0@{worker.name}"
    first = wait_for(lambda: main_process_of(slot), timeout=30)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: main_process_of(slot) not in (None, first), timeout=30, what="a restart")

    worker.stop()
    assert worker.process.returncode == 0
    assert processes_mentioning(worker.name) == {}
    assert not Gpu.objects.online().filter(node__name=worker.name).exists()
