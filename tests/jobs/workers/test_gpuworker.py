"""`manage.py gpuworker`: slots registered and kept alive, a dead worker restarted, and nothing left
running after it is stopped."""

import os
import re
import signal
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.storage import default_storage
from django.db import connection

from jobs import enqueue, processors
from jobs.management.commands.gpuworker import Command, bound_lock_waits
from jobs.models import Gpu, Job, State
from jobs.staging import stage
from tests.factories import make_job
from tests.jobs.workers.processes import main_process_of, processes_mentioning
from tests.support import Worker, job_form, wait_for, wait_for_end

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(django_db_setup, redis_server, transactional_db):
    worker = Worker(f"gpuworker-test-{uuid.uuid4().hex[:8]}", slots=1)  # its own log: no earlier test's lines
    yield worker
    if worker.process.poll() is None:
        worker.stop()


def test_it_registers_its_slots_restarts_a_dead_worker_and_leaves_nothing_behind(worker):
    wait_for(lambda: Gpu.objects.online().filter(node__name=worker.name).count() == 1, timeout=60)
    slot = f"slot0@{worker.name}"
    first = wait_for(lambda: main_process_of(slot), timeout=30)
    environment = Path(f"/proc/{first}/environ").read_bytes().split(b"\0")
    assert b"CELERY_SKIP_CHECKS=1" in environment, "the gpuworker ran the system checks: its workers do not again"
    assert Command.requires_system_checks == "__all__"
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: main_process_of(slot) not in (None, first), timeout=30, what="a restart")

    worker.stop()
    assert worker.process.returncode == 0
    assert processes_mentioning(worker.name) == {}
    assert not Gpu.objects.online().filter(node__name=worker.name).exists()


def test_a_job_left_queued_with_free_slots_is_started_by_a_heartbeat(worker, organisation, monkeypatch):
    """The scheduler runs when staging ends; should that miss (slots a heartbeat had locked, a message
    lost while the broker was away), the node's next heartbeat asks again."""
    log = settings.VAR_DIR / f"{worker.name}.log"
    wait_for(lambda: re.search(r"jobs\.tasks\.schedule\[.*\] succeeded", log.read_text()), timeout=60,
             what="the schedule a node asks for when it starts")  # fmt: skip
    wait_for(lambda: Gpu.objects.filter(node__name=worker.name).free().exists(), timeout=60,
             what="its slot online: the node counts a slot once its worker answers")  # fmt: skip
    monkeypatch.setattr(enqueue, "schedule", lambda: None)  # staging here sends no schedule
    upload = job_form(gpus="1")["data"]
    path = default_storage.save("uploads/customers.csv", upload)
    job = make_job(organisation, source_name="customers.csv", source_path=path)
    stage.stage(job.pk)
    job = Job.objects.get(pk=job.pk)
    assert job.events.filter(state=State.QUEUED).exists(), "staged, then left for the heartbeat to start"
    job = wait_for_end(job, timeout=60)
    assert job.state == State.SUCCEEDED, job.error


def test_a_slot_imports_its_work_kinds_libraries_before_it_counts_online(django_db_setup, redis_server):
    worker = Worker(f"gpuworker-warm-{uuid.uuid4().hex[:8]}", slots=1, E31_WARM_SLOTS="true")
    try:
        wait_for(lambda: Gpu.objects.online().filter(node__name=worker.name).count() == 1, timeout=120)
        log = (settings.VAR_DIR / f"{worker.name}.log").read_text()
        kinds = ", ".join(processors.runnable_here())
        assert re.search(rf"slot0@{worker.name}: the libraries of {re.escape(kinds)} imported in [\d.]+ s", log)
    finally:
        worker.stop()


def test_the_supervisor_waits_for_another_process_lock_at_most_half_a_node_timeout(settings):
    settings.E31_NODE_TIMEOUT_SECONDS = 9
    bound_lock_waits(None, connection)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout" if connection.vendor == "postgresql" else "PRAGMA busy_timeout")
            assert cursor.fetchone()[0] in ("4500ms", 4500)
    finally:
        connection.close()
