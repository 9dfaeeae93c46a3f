"""A node that misses its heartbeats goes offline: its holds end when it was last seen (a dead GPU is
not metered), its running shards go back to the job's other slots at once, a job left without a slot
goes back to the queue, a node that comes back cannot commit a shard it lost, and the ledger bills
each GPU for its own time."""

import math
import os
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from billing.metering import meter_for
from billing.models import LedgerEntry
from jobs import lifecycle
from jobs.models import Allocation, Gpu, Job, JobEvent, Node, Shard, State
from jobs.scheduling import schedule
from jobs.staging import stage
from jobs.workers.node import go_offline, take_silent_nodes_offline
from jobs.workers.runner import ShardLost, claim_next, process_shard, run_slot
from tests.datasets import csv_bytes
from tests.jobs.workers.gpu_time import as_gpu_hours, gpu_seconds
from tests.support import Worker, Workers, job_form, kill_when, wait_for, wait_for_end, wait_for_slots

pytestmark = pytest.mark.system


@pytest.fixture
def two_fake_nodes(db):
    """Two online nodes of one CPU slot each, with no worker behind them: seen a day ahead, so that they stay
    online however long the job takes to stage (a test silences one with `silence`)."""
    Gpu.objects.update(last_seen=None)
    now = timezone.now() + timedelta(days=1)
    slots = []
    for letter in "ab":
        node = Node.objects.create(name=f"fake-{letter}", hostname=letter, last_seen=now)
        slots.append(
            Gpu.objects.create(
                node=node, index=0, kind=Gpu.Kind.CPU, name="CPU slot", queue=f"slot.fake-{letter}.0", last_seen=now
            )
        )
    return slots


@pytest.fixture
def held_job(partner_client, two_fake_nodes):
    """A staged job of 2000 records in shards, held on both fake nodes for a minute."""
    form = job_form(csv_bytes(), name="numbers.csv", work="test-slow-echo", gpus="2", request_kind="fixed")
    form["param-test-slow-echo-seconds_per_batch"] = "0"
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = Job.objects.get()
    stage.stage(job.pk)
    assert lifecycle.start_hold(job, two_fake_nodes)
    Allocation.objects.filter(job=job).update(held_from=timezone.now() - timedelta(minutes=1))
    return Job.objects.get(pk=job.pk)


def silence(slot: Gpu, seconds: float = 30) -> Node:
    """The slot's node stopped sending heartbeats `seconds` ago."""
    last_seen = timezone.now() - timedelta(seconds=seconds)
    Node.objects.filter(pk=slot.node_id).update(last_seen=last_seen)
    Gpu.objects.filter(node=slot.node_id).update(last_seen=last_seen)
    return Node.objects.get(pk=slot.node_id)


@pytest.mark.django_db
def test_it_ends_a_silent_nodes_hold_at_its_last_heartbeat_and_returns_its_shards(held_job, two_fake_nodes):
    dead, alive = two_fake_nodes
    shard, _ = claim_next(held_job, dead)
    node = silence(dead)

    assert take_silent_nodes_offline() == [held_job.pk]
    assert take_silent_nodes_offline() == [], "a node is taken offline once"

    lost = Allocation.objects.get(job=held_job, gpu=dead)
    assert lost.held_to == node.last_seen
    assert Allocation.objects.get(job=held_job, gpu=alive).held_to is None
    shard.refresh_from_db()
    assert (shard.status, shard.claim, shard.lease_until) == (Shard.Status.PENDING, "", None)
    held_job.refresh_from_db()
    assert held_job.state == State.RUNNING
    event = held_job.events.last()
    assert event.state == State.RUNNING
    assert "node fake-a went offline" in event.message and "1 running shard returned" in event.message
    assert claim_next(held_job, alive)[0] == shard, "the job's other slot takes it at once, lease or not"


@pytest.mark.django_db
def test_a_node_that_stops_ends_its_holds_at_once(held_job, two_fake_nodes):
    stopping, alive = two_fake_nodes
    shard, _ = claim_next(held_job, stopping)
    before = timezone.now()
    go_offline(stopping.node.name)
    lost = Allocation.objects.get(job=held_job, gpu=stopping)
    assert before <= lost.held_to <= timezone.now()
    assert Shard.objects.get(pk=shard.pk).status == Shard.Status.PENDING
    assert Allocation.objects.get(job=held_job, gpu=alive).held_to is None
    assert Job.objects.get(pk=held_job.pk).state == State.RUNNING


@pytest.mark.django_db
def test_a_node_that_comes_back_cannot_commit_the_shard_it_lost(held_job, two_fake_nodes):
    dead, alive = two_fake_nodes
    shard, stale_token = claim_next(held_job, dead)
    silence(dead)
    take_silent_nodes_offline()
    retaken, token = claim_next(held_job, alive)
    assert retaken == shard
    process_shard(held_job, retaken, token, alive)

    # The node wakes up mid-shard: its claim is gone, so its output is thrown away, and its slot stops.
    with pytest.raises(ShardLost):
        process_shard(held_job, shard, stale_token, dead)
    assert run_slot(held_job.pk, Allocation.objects.get(job=held_job, gpu=dead).pk) == "released"
    shard.refresh_from_db()
    assert (shard.status, shard.gpu, shard.claim) == (Shard.Status.DONE, alive, token)
    assert shard.output_path.endswith(f"{token}.parquet")
    shard_files = default_storage.listdir(f"{held_job.storage_prefix}/shards")[1]
    assert {Path(shard.output_path).name, Path(shard.rejects_path).name} <= set(shard_files)
    assert not [name for name in shard_files if stale_token in name], "nothing of the lost claim is kept"


@pytest.mark.django_db
def test_a_job_left_without_a_slot_waits_in_the_queue_unmetered_and_is_held_again(held_job, two_fake_nodes):
    claim_next(held_job, two_fake_nodes[0])
    nodes = [silence(slot, seconds) for slot, seconds in zip(two_fake_nodes, (40, 20), strict=True)]

    assert take_silent_nodes_offline() == [held_job.pk, held_job.pk]
    held_job.refresh_from_db()
    assert held_job.state == State.QUEUED
    assert held_job.events.last().message.endswith("no slot left, back in the queue")
    first_holds = list(Allocation.objects.filter(job=held_job))
    assert [a.held_to for a in first_holds] == [node.last_seen for node in nodes]
    assert not Shard.objects.filter(job=held_job, status=Shard.Status.RUNNING).exists()
    assert not LedgerEntry.objects.filter(job=held_job, kind=LedgerEntry.Kind.HOLD).exists(), "written at the end"
    assert meter_for(held_job).gpu_hours == as_gpu_hours(gpu_seconds(first_holds)), "the meter stopped"

    Gpu.objects.filter(pk__in=[slot.pk for slot in two_fake_nodes]).update(last_seen=timezone.now())  # back
    assert schedule() == [held_job.pk]
    held_job.refresh_from_db()
    assert held_job.state == State.RUNNING
    assert Allocation.objects.filter(job=held_job, held_to__isnull=True).count() == 2
    first_hold = max(node.last_seen for node in nodes) - first_holds[0].held_from
    assert held_job.held_before == first_hold, "held until its last node went silent"
    assert held_job.time_limit_at() == held_job.started_at + timedelta(hours=1) - first_hold, "the hours held in all"

    assert lifecycle.cancel(held_job)
    entry = LedgerEntry.objects.get(job=held_job, kind=LedgerEntry.Kind.HOLD)
    allocations = list(Allocation.objects.filter(job=held_job))
    assert len(allocations) == 4 and entry.gpus == 2
    assert entry.gpu_hours == as_gpu_hours(gpu_seconds(allocations)), "both holds, not the time in the queue"
    assert entry.held_from == first_holds[0].held_from
    assert entry.held_to == max(a.held_to for a in allocations)
    second = [a for a in allocations if a.held_from > first_holds[0].held_from]
    held = [first_hold, max(a.held_to for a in second) - second[0].held_from]
    assert entry.seconds == sum(math.ceil(span.total_seconds()) for span in held), "the time held, not the queue"
    assert entry.seconds < (entry.held_to - entry.held_from).total_seconds() - 15


@pytest.mark.django_db
def test_the_ledger_bills_each_gpu_for_its_own_time(held_job, two_fake_nodes, rate_card):
    start = timezone.now() - timedelta(hours=2)
    Allocation.objects.filter(job=held_job).update(held_from=start)
    Allocation.objects.filter(job=held_job, gpu=two_fake_nodes[0]).update(held_to=start + timedelta(minutes=30))
    lifecycle.release(held_job, at=start + timedelta(hours=2))
    entry = LedgerEntry.objects.get(job=held_job, kind=LedgerEntry.Kind.HOLD)
    assert (entry.gpus, entry.seconds, entry.gpu_hours) == (2, 7200, Decimal("2.5"))
    assert entry.amount == Decimal("2.5") * rate_card.rate_per_gpu_hour
    assert (entry.held_from, entry.held_to) == (start, start + timedelta(hours=2))


def node_processes(root: int) -> list[int]:
    """The process and all its descendants (a gpuworker starts its workers in sessions of their own)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [root], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


@pytest.fixture
def nodes_to_kill(django_db_setup, redis_server):
    """Two gpuworker processes of one CPU slot each, this test's own: it kills one."""
    with Workers(Worker(f"doomed-{letter}-{os.getpid()}", slots=1) for letter in "ab") as nodes:
        yield nodes


@pytest.mark.django_db(transaction=True)
def test_a_node_killed_mid_job_goes_offline_and_the_job_finishes_on_the_other(nodes_to_kill, partner_client, rate_card):
    for node in nodes_to_kill:
        wait_for_slots(node)
    rows = 8000

    def submitted() -> bool:
        """The form counts the slots online as it is posted: a heartbeat held up a moment (SQLite's
        write lock, on a loaded machine) makes it see one node; the form then refuses, and says so."""
        form = job_form(csv_bytes(rows), name="numbers.csv", work="test-slow-echo", gpus="2", request_kind="fixed")
        form["param-test-slow-echo-seconds_per_batch"] = "0.1"
        response = partner_client.post("/jobs/new/", form)
        refusals = ("The fleet has 1 CPU slot online", "No GPUs are online right now", "No online node can run")
        assert response.status_code == 302 or any(text in response.content.decode() for text in refusals)
        return response.status_code == 302

    wait_for(submitted, timeout=60, what="the job accepted while both nodes are online")
    job = Job.objects.get()
    victim, survivor = nodes_to_kill

    def running_on_victim_seen_while_held(pids):
        held = Allocation.objects.filter(job=job, gpu__node__name=victim.name).first()
        if held is None or Node.objects.get(name=victim.name).last_seen <= held.held_from:
            return None
        return Shard.objects.filter(job=job, status=Shard.Status.RUNNING, gpu__node__name=victim.name).first()

    lost = kill_when(  # the whole machine: gpuworker, its workers, their pools
        lambda: node_processes(victim.process.pid), running_on_victim_seen_while_held, what="a shard on the victim"
    )
    victim.process.wait()

    released = wait_for(
        lambda: Allocation.objects.filter(job=job, gpu__node__name=victim.name, held_to__isnull=False).first(),
        timeout=60,
        what="the victim's hold to end",
    )
    node = Node.objects.get(name=victim.name)
    assert released.held_to == node.last_seen, "held until its last heartbeat, not until it was noticed"
    assert not Gpu.objects.online().filter(node=node).exists()
    assert JobEvent.objects.filter(job=job, message__startswith=f"node {victim.name} went offline").exists()

    wait_for_end(job, timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    lost.refresh_from_db()
    assert lost.status == Shard.Status.DONE and lost.gpu.node.name == survivor.name
    assert lost.attempts >= 2
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        records = pq.read_table(output).column("_record").to_pylist()
    assert records == list(range(1, rows + 1)), "every record exactly once"

    allocations = list(Allocation.objects.filter(job=job))
    entry = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.HOLD)
    assert entry.gpus == 2
    assert entry.gpu_hours == as_gpu_hours(gpu_seconds(allocations))
    assert entry.gpu_hours < as_gpu_hours(2 * entry.seconds), "the dead GPU is billed only until it died"
    assert entry.amount == (entry.gpu_hours * rate_card.rate_per_gpu_hour).quantize(Decimal("0.0001"))


@pytest.mark.django_db
def test_a_job_whose_hours_were_up_when_its_last_node_went_times_out_instead_of_queueing_again(
    held_job, two_fake_nodes, rate_card
):
    two_hours_ago = timezone.now() - timedelta(hours=2)
    Job.objects.filter(pk=held_job.pk).update(started_at=two_hours_ago)
    Allocation.objects.filter(job=held_job).update(held_from=two_hours_ago)
    for slot in two_fake_nodes:
        silence(slot)

    take_silent_nodes_offline()
    held_job.refresh_from_db()
    assert held_job.state == State.TIMED_OUT and held_job.error == "The job ran past its 1.00 h limit."
    limit = two_hours_ago + timedelta(hours=1)
    assert {a.held_to for a in Allocation.objects.filter(job=held_job)} == {limit}, "held until the limit only"
    entry = LedgerEntry.objects.get(job=held_job, kind=LedgerEntry.Kind.HOLD)
    assert (entry.gpus, entry.seconds, entry.gpu_hours) == (2, 3600, Decimal(2))
    assert schedule() == [], "nothing left to hold it again for"
