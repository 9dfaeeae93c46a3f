"""Faults on a node's own processes, with real gpuworkers: the meter stops when a slot's worker or
the whole node died, not when somebody noticed; a restarted slot or node serves the job again within
beats; a gpuworker's slot workers never outlive it; and a hold whose slot task was lost gets a new one."""

import os
import signal
import subprocess
import uuid
from datetime import timedelta

import pyarrow.parquet as pq
import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from billing.models import LedgerEntry
from jobs import lifecycle
from jobs.models import Allocation, Gpu, Job, JobEvent, Node, Shard, State
from jobs.workers.node import process_runs, serve_held_slots, slot_stopped
from jobs.workers.runner import run_slot
from tests.datasets import csv_bytes
from tests.factories import make_job
from tests.jobs.workers.gpu_time import as_gpu_hours, gpu_seconds
from tests.jobs.workers.processes import main_process_of, processes_mentioning
from tests.support import Worker, job_form, wait_for, wait_for_end, wait_for_slots

pytestmark = pytest.mark.system


@pytest.fixture
def workers(django_db_setup, redis_server, transactional_db):
    """gpuworkers a test starts (and restarts); each stopped at the end if still running."""
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.stop()


def submit_slow(client, rows: int, seconds_per_batch: str) -> Job:
    form = job_form(csv_bytes(rows), name="numbers.csv", work="test-slow-echo", gpus="2")
    form["param-test-slow-echo-seconds_per_batch"] = seconds_per_batch
    assert client.post("/jobs/new/", form).status_code == 302
    return Job.objects.get()


def assert_every_record_once(job: Job, rows: int) -> None:
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        assert pq.read_table(output).column("_record").to_pylist() == list(range(1, rows + 1))


def assert_billed_as_held(job: Job) -> list[Allocation]:
    allocations = list(Allocation.objects.filter(job=job).order_by("held_from"))
    entry = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.HOLD)
    assert entry.gpus == 2
    assert entry.gpu_hours == as_gpu_hours(gpu_seconds(allocations)), "each hold for its own time"
    return allocations


@pytest.mark.django_db(transaction=True)
def test_a_node_killed_takes_its_slot_workers_at_once_and_is_not_billed_while_dead(workers, partner_client, rate_card):
    name = f"faults-{uuid.uuid4().hex[:8]}"
    workers.append(wait_for_slots(Worker(name, slots=2)))
    rows = 8000
    job = submit_slow(partner_client, rows, "0.3")  # ~40 s on one slot: still running once it holds both
    wait_for(lambda: Shard.objects.filter(job=job, status=Shard.Status.DONE).exists(), timeout=60,
             what="a shard done")  # fmt: skip

    def on_both_slots_seen_while_held() -> bool:
        """Its data staged, the job on both slots, and the node beat since: held until last seen is then a while."""
        holds = list(job.allocations.filter(held_to=None).values_list("held_from", flat=True))
        seen = Node.objects.get(name=name).last_seen
        return not Job.objects.get(pk=job.pk).streaming and len(holds) == 2 and seen > max(holds)

    def standing() -> str:
        now = Job.objects.get(pk=job.pk)
        holds = list(job.allocations.values_list("held_from", "held_to"))
        return f"the job on both slots, seen while held (it is {now.state}, streaming {now.streaming}; holds {holds})"

    wait_for(on_both_slots_seen_while_held, timeout=60, what=standing)
    slot_workers = [pid for pid, command in processes_mentioning(f"@{name}").items() if "slot" in command]
    assert slot_workers

    workers[0].process.kill()  # the supervisor alone: the kernel takes its workers down
    workers[0].process.wait()
    wait_for(lambda: not any(process_runs(pid) for pid in slot_workers), timeout=30,
             what="the slot workers to stop with their gpuworker, not after their slice")  # fmt: skip
    died = Node.objects.get(name=name).last_seen
    wait_for(lambda: timezone.now() > died + timedelta(seconds=2), what="the node to be dead a while")

    restarted_at = timezone.now()
    workers.append(Worker(name, slots=2))
    job = wait_for_end(job, timeout=180)
    assert job.state == State.SUCCEEDED, job.error
    assert_every_record_once(job, rows)
    allocations = assert_billed_as_held(job)
    before = [a for a in allocations if a.held_from < died and a.held_to == died]
    after = [a for a in allocations if a.held_from >= died]
    assert len(before) == 2, (
        f"held until the node was last seen ({died}): {[(a.held_from, a.held_to) for a in allocations]}"
    )
    assert len(after) == 2 and all(a.held_from >= restarted_at for a in after), "held again once it was back"
    assert JobEvent.objects.filter(job=job, message__startswith=f"node {name} went offline").exists()


@pytest.mark.django_db(transaction=True)
def test_a_slot_whose_worker_is_killed_is_billed_until_last_seen_and_rejoins_its_job(
    workers, partner_client, rate_card
):
    name = f"faults-{uuid.uuid4().hex[:8]}"
    workers.append(wait_for_slots(Worker(name, slots=2)))
    rows = 8000
    job = submit_slow(partner_client, rows, "0.3")  # ~40 s on one slot: it outlasts the slot's restart
    shard = wait_for(
        lambda: Shard.objects.filter(job=job, status=Shard.Status.RUNNING, gpu__index=0, gpu__node__name=name).first(),
        timeout=60,
        what="a shard running on slot 0",
    )
    main = main_process_of(f"slot0@{name}")
    os.kill(main, signal.SIGKILL)
    # Read once the process is dead (a zombie or gone): a heartbeat that looked at the slot before is still its
    # last sign of life, and on a loaded machine one may look between the kill and the process's end.
    wait_for(lambda: not process_runs(main), timeout=30, what="the slot's main process to die")
    killed_at = timezone.now()

    wait_for(lambda: not process_runs(shard.worker_pid), timeout=30, what="the slot's pool process to go with it")
    slot = Gpu.objects.get(node__name=name, index=0)
    lost = wait_for(lambda: Allocation.objects.filter(job=job, gpu=slot, held_to__isnull=False).first(),
                    timeout=60, what="the slot's hold to end")  # fmt: skip
    assert lost.held_to <= killed_at, "billed until the slot was last seen alive, not until noticed"
    wait_for(lambda: Allocation.objects.filter(job=job, gpu=slot, held_from__gt=killed_at).exists(), timeout=60,
             what="the slot to rejoin its job")  # fmt: skip

    job = wait_for_end(job, timeout=180)
    assert job.state == State.SUCCEEDED, job.error
    assert_every_record_once(job, rows)
    assert_billed_as_held(job)
    messages = list(job.events.values_list("message", flat=True))
    assert any(m.startswith(f"the worker of CPU slot 0 on node {name} stopped") for m in messages)
    assert f"CPU slot 0 of node {name} back: held again" in messages


@pytest.fixture
def held(online_slots, organisation):
    """A running job held on two of the fake node's slots (no worker behind them)."""
    job = make_job(organisation, State.QUEUED, gpus=2)
    assert lifecycle.start_hold(job, online_slots[:2])
    Allocation.objects.filter(job=job).update(
        held_from=timezone.now() - timedelta(minutes=1), runner_seen=timezone.now()
    )
    return Job.objects.get(pk=job.pk)


@pytest.mark.django_db
def test_a_hold_whose_slot_task_went_silent_is_billed_until_it_reported_and_served_again(
    held, online_slots, redis_server, django_capture_on_commit_callbacks, settings
):
    quiet = timezone.now() - timedelta(seconds=settings.E31_NODE_TIMEOUT_SECONDS + 1)
    silent, working = Allocation.objects.filter(job=held).order_by("gpu__index")
    Allocation.objects.filter(job=held).update(runner="old", runner_seen=quiet)
    lease = timezone.now() + timedelta(seconds=30)
    Shard.objects.create(job=held, index=0, first_record=1, record_count=5, first_line=2, start_byte=0, end_byte=50,
                         status=Shard.Status.RUNNING, gpu=working.gpu, lease_until=lease,
                         worker_pid=os.getpid())  # fmt: skip
    # A live lease whose process is gone (a pool process killed) proves nothing.
    Shard.objects.create(job=held, index=1, first_record=6, record_count=5, first_line=7, start_byte=50, end_byte=99,
                         status=Shard.Status.RUNNING, gpu=silent.gpu, lease_until=lease,
                         worker_pid=ended_pid())  # fmt: skip
    redis_server.delete(silent.gpu.queue, working.gpu.queue)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            [rejoined] = serve_held_slots("fake-node", {0, 1, 2, 3})
        assert (redis_server.llen(silent.gpu.queue), redis_server.llen(working.gpu.queue)) == (1, 0)
    finally:
        redis_server.delete(silent.gpu.queue, working.gpu.queue)
    silent.refresh_from_db()
    assert silent.held_to == quiet, "billed until its task last reported, not while nobody served it"
    assert Allocation.objects.get(pk=working.pk).held_to is None, "a live process on a live lease works"
    assert Shard.objects.get(job=held, index=1).status == Shard.Status.PENDING, "the dead process's shard went back"
    again = Allocation.objects.get(pk=rejoined)
    assert again.gpu == silent.gpu and again.held_from > quiet and again.runner not in ("", "old")
    assert run_slot(held.pk, silent.pk, "old") == "released", "a message restored late does not run beside it"
    assert run_slot(held.pk, again.pk, "old") == "superseded"
    assert run_slot(held.pk, again.pk, "") == "superseded", "nor one sent before tokens"
    assert any(m.startswith("the task serving CPU slot 0 on node fake-node was lost") for m in messages_of(held))


def ended_pid() -> int:
    """The id of a process that has run and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def messages_of(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).values_list("message", flat=True))


@pytest.mark.django_db
def test_a_slot_that_stops_ends_its_hold_when_last_seen_and_rejoins_when_back(
    held, online_slots, redis_server, django_capture_on_commit_callbacks, rate_card
):
    first, other = online_slots[:2]
    Shard.objects.create(job=held, index=0, first_record=1, record_count=5, first_line=2, start_byte=0, end_byte=50)
    last_seen = timezone.now() - timedelta(seconds=4)
    Gpu.objects.filter(pk=first.pk).update(last_seen=last_seen)
    assert slot_stopped("fake-node", first.index) == [held.pk]
    assert Allocation.objects.get(job=held, gpu=first).held_to == last_seen
    assert Job.objects.get(pk=held.pk).state == State.RUNNING, "it carries on on its other slot"
    assert not Gpu.objects.online().filter(pk=first.pk).exists(), "offline until its worker is ready"

    assert serve_held_slots("fake-node", {first.index}) == [], "not before the slot is seen again"
    Gpu.objects.filter(pk=first.pk).update(last_seen=timezone.now())
    redis_server.delete(first.queue)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            [rejoined] = serve_held_slots("fake-node", {first.index, other.index})
        assert redis_server.llen(first.queue) == 1
    finally:
        redis_server.delete(first.queue)
    assert Allocation.objects.get(pk=rejoined).gpu == first
    assert Allocation.objects.filter(job=held, held_to__isnull=True).count() == 2, "never more than it asked for"
    Allocation.objects.filter(pk=rejoined).update(held_to=timezone.now())
    Shard.objects.filter(job=held).update(status=Shard.Status.DONE)
    assert serve_held_slots("fake-node", {first.index}) == [], "nor a slot when no shard is left to take"

    assert lifecycle.cancel(held)
    entry = LedgerEntry.objects.get(job=held, kind=LedgerEntry.Kind.HOLD)
    allocations = list(Allocation.objects.filter(job=held))
    assert entry.gpus == 2 and entry.gpu_hours == as_gpu_hours(gpu_seconds(allocations))
    span = max(a.held_to for a in allocations) - min(a.held_from for a in allocations)
    assert entry.seconds <= span.total_seconds() + 1, "a rejoined slot's time is not counted twice"


@pytest.mark.django_db(transaction=True)
def test_a_batch_longer_than_a_lease_and_a_node_timeout_keeps_its_claim_and_its_hold(fleet, partner_client):
    """A partner's large model loads in its first batch, a generation runs long: the slot is working, not lost.
    Here a shard's two batches take 10 s each: twice a shard's lease (5 s), and together twice a node's
    timeout (10 s), within which a hold with no live lease must hear from its slot task."""
    form = job_form(csv_bytes(100), name="numbers.csv", work="test-slow-echo", gpus="1")
    form["param-test-slow-echo-seconds_per_batch"] = "10"
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    assert_every_record_once(job, 100)
    assert Allocation.objects.filter(job=job).count() == 1, "one hold, never taken offline and joined again"
    assert list(job.shards.values_list("attempts", flat=True)) == [1], "one shard of two batches, never taken over"
    assert not JobEvent.objects.filter(job=job, message__contains="was lost").exists()
