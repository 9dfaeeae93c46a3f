"""A shard is claimed by one slot only, even when two slots race for it on separate connections."""

import os
import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import lifecycle
from jobs.models import Job, Shard, State
from jobs.workers.runner import claim_next
from tests.factories import make_job
from tests.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def running_job(organisation, online_slots):
    job = make_job(organisation, State.QUEUED, gpus=2)
    lifecycle.start_hold(job, online_slots[:2])
    Shard.objects.create(job=job, index=0, first_record=1, record_count=5, first_line=2, start_byte=0, end_byte=50)
    return Job.objects.get(pk=job.pk)


def _blocked_on_a_lock() -> bool:
    if connection.vendor != "postgresql":
        time.sleep(1)  # SQLite has no view of waiting statements; the second claim is under way by now
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # the view is otherwise frozen for the transaction
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
        return cursor.fetchone()[0] > 0


def _claim_beside(job: Job, slot, result: dict) -> threading.Thread:
    """A claim by `slot` on a connection of its own, in a thread started now; what it claimed in `result`."""

    def claim():
        try:
            result["second"] = claim_next(job, slot)
        finally:
            connections.close_all()

    racer = threading.Thread(target=claim)
    racer.start()
    return racer


def test_the_slot_that_loses_the_race_for_a_shard_claims_nothing(running_job, online_slots):
    first, second = online_slots[:2]
    result = {}
    with transaction.atomic():
        assert claim_next(running_job, first) is not None
        racer = _claim_beside(running_job, second, result)
        wait_for(_blocked_on_a_lock, what="the second claim to wait for the first")
    racer.join(timeout=30)
    assert result == {"second": None}
    shard = Shard.objects.get(job=running_job)
    assert (shard.status, shard.gpu, shard.attempts) == (Shard.Status.RUNNING, first, 1)


def test_a_slot_whose_hold_ended_claims_nothing(running_job, online_slots):
    first, second = online_slots[:2]
    running_job.allocations.filter(gpu=second).update(held_to=running_job.started_at)
    assert claim_next(running_job, second) is None, "its node went offline and came back: the hold is over"
    assert claim_next(running_job, online_slots[2]) is None, "a slot the job never held"
    shard, _ = claim_next(running_job, first)
    assert Shard.objects.get(pk=shard.pk).gpu == first


def test_a_shard_that_failed_on_a_slot_is_left_to_another_live_slot_and_taken_when_none_is(running_job, online_slots):
    first, second = online_slots[:2]
    for index in range(1, 10):  # more shards failed here than one read of candidates holds
        Shard.objects.create(
            job=running_job, index=index, first_record=1, record_count=5, first_line=2, start_byte=0, end_byte=50
        )
    Shard.objects.filter(job=running_job, index__lt=9).update(failed_on=first, attempts=1)
    shard, _ = claim_next(running_job, first)
    assert shard.index == 9, "the nine that failed on it are left to the other slot, however many"
    shard, _ = claim_next(running_job, second)
    assert shard.index == 0, "the other slot retries them"
    running_job.allocations.filter(gpu=second).update(held_to=running_job.started_at)
    shard, _ = claim_next(running_job, first)
    assert shard.index == 1, "no other slot held: it retries them itself"


def _more_shards(job: Job, count: int) -> None:
    Shard.objects.bulk_create(
        Shard(job=job, index=index, first_record=1, record_count=5, first_line=2, start_byte=0, end_byte=50)
        for index in range(1, count + 1)
    )


def test_a_claim_of_a_plain_shard_is_one_statement_and_says_what_it_wrote(running_job, online_slots):
    first, second = online_slots[:2]
    _more_shards(running_job, 2)
    taken = {"status": Shard.Status.RUNNING, "gpu": second, "attempts": 1}
    Shard.objects.filter(job=running_job, index=0).update(**taken, lease_until=timezone.now() - timedelta(seconds=1))
    Shard.objects.filter(job=running_job, index=1).update(**taken, lease_until=timezone.now() + timedelta(hours=1))
    with CaptureQueriesContext(connection) as queries:
        shard, token = claim_next(running_job, first)
    assert len(queries) == 1, [query["sql"] for query in queries]
    assert (shard.index, shard.status, shard.gpu, shard.claim, shard.attempts) == (0, "running", first, token, 2)
    assert shard.lease_until > timezone.now(), "a lease that ran out is taken over, with a lease of its own"
    Shard.objects.filter(pk=shard.pk).update(status=Shard.Status.DONE)
    shard, _ = claim_next(running_job, first)
    assert shard.index == 2, "a live lease is left alone"
    stored = Shard.objects.get(pk=shard.pk)
    assert (stored.status, stored.gpu, stored.attempts, stored.worker_pid) == ("running", first, 1, os.getpid())


def test_a_shard_out_of_attempts_is_settled_before_the_next_is_claimed(running_job, online_slots):
    _more_shards(running_job, 1)
    Shard.objects.filter(job=running_job, index=0).update(attempts=settings.E31_SHARD_MAX_ATTEMPTS, error="boom")
    Job.objects.filter(pk=running_job.pk).update(allow_partial=True)
    running_job.refresh_from_db()
    shard, _ = claim_next(running_job, online_slots[0])
    assert shard.index == 1
    assert Shard.objects.get(job=running_job, index=0).status == Shard.Status.FAILED, "left out, not retried"


@pytest.mark.skipif(
    "connection.vendor != 'postgresql'",
    reason="PostgreSQL's SKIP LOCKED: SQLite lets one writer in at a time, so there a second claim waits its turn",
)
def test_on_postgresql_a_claim_passes_over_a_shard_another_slot_is_claiming(running_job, online_slots):
    first, second = online_slots[:2]
    _more_shards(running_job, 1)
    result = {}
    with transaction.atomic():
        assert claim_next(running_job, first)[0].index == 0
        racer = _claim_beside(running_job, second, result)
        racer.join(timeout=30)
        assert not racer.is_alive(), "it waited for the first claim's transaction"
    assert result["second"][0].index == 1
