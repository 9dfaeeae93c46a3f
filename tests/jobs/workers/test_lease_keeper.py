"""The lease keeper renews a working shard's lease from a thread of its own, for as long as the work moves on:
a step that runs past E31_BATCH_MAX_SECONDS is taken as stuck, and its lease lapses as a dead process's does."""

import time
from datetime import timedelta
from functools import partial

import pytest
from django.utils import timezone

from jobs.models import Allocation, Shard, State
from jobs.workers.runner import LeaseKeeper
from tests.factories import make_job
from tests.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the keeper's thread has its own connection


@pytest.fixture
def claimed(organisation, settings):
    settings.E31_SHARD_LEASE_SECONDS = 4  # renewed every second
    settings.E31_BATCH_MAX_SECONDS = 1
    job = make_job(organisation, State.RUNNING, started_at=timezone.now())
    return Shard.objects.create(
        job=job, index=0, first_record=1, record_count=5, first_line=2, start_byte=0, end_byte=50,
        status=Shard.Status.RUNNING, claim="token", lease_until=timezone.now() + timedelta(seconds=4),
    )  # fmt: skip


def lease_of(shard: Shard):
    return Shard.objects.values_list("lease_until", flat=True).get(pk=shard.pk)


def test_a_step_that_runs_too_long_lets_its_lease_lapse(claimed):
    with LeaseKeeper(claimed, "token") as keeper:
        wait_for(lambda: lease_of(claimed) < timezone.now(), timeout=30, what="the stuck step's lease to lapse")
        assert not keeper.thread.is_alive(), "the keeper gave up on it"
    assert Shard.objects.get(pk=claimed.pk).claim == "token", "the lease lapses; reconcile takes the shard back"


def test_work_that_moves_on_keeps_its_lease_well_past_the_longest_step(claimed, settings):
    settings.E31_BATCH_MAX_SECONDS = 3  # steps of 0.2 s, a loaded machine's late wake-ups and all
    first = lease_of(claimed)
    with LeaseKeeper(claimed, "token") as keeper:
        deadline = time.monotonic() + 8  # past the longest step (3 s) and the lease (4 s) together
        while time.monotonic() < deadline:
            keeper.moved_on()
            time.sleep(0.2)
        assert keeper.thread.is_alive()
        assert lease_of(claimed) > max(first, timezone.now()), "renewed all along"


def test_it_says_the_task_still_serves_its_hold_while_a_long_shard_runs(claimed, online_slots):
    """A shard longer than a node's timeout: the task reports on its hold only between shards, so the keeper
    reports for it, or the node would take the hold for lost while its slot works (CI saw it under load)."""
    long_ago = timezone.now() - timedelta(minutes=5)
    hold = Allocation.objects.create(
        job=claimed.job, gpu=online_slots[0], held_from=long_ago, runner="mine", runner_seen=long_ago
    )
    superseded = Allocation.objects.create(
        job=claimed.job, gpu=online_slots[1], held_from=long_ago, runner="newer", runner_seen=long_ago
    )

    def reported(keeper: LeaseKeeper, allocation: Allocation) -> bool:
        keeper.moved_on()
        return Allocation.objects.get(pk=allocation.pk).runner_seen > long_ago

    def renewed(keeper: LeaseKeeper, since) -> bool:
        keeper.moved_on()
        return lease_of(claimed) > since

    with LeaseKeeper(claimed, "token", (hold.pk, "mine")) as keeper:
        wait_for(lambda: reported(keeper, hold), timeout=30, what="the hold reported on with the lease")
    with LeaseKeeper(claimed, "token", (superseded.pk, "older")) as keeper:
        for _ in range(2):  # the first renewal's report is done by the second's
            wait_for(partial(renewed, keeper, lease_of(claimed)), timeout=30, what="a renewal")
    assert not reported(keeper, superseded), "a newer task's hold is its own"
