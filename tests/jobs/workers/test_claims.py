"""A shard is claimed by one slot only, even when two slots race for it on separate connections."""

import threading
import time

import pytest
from django.db import connection, connections, transaction

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


def test_the_slot_that_loses_the_race_for_a_shard_claims_nothing(running_job, online_slots):
    first, second = online_slots[:2]
    result = {}

    def race():
        try:
            result["second"] = claim_next(running_job, second)
        finally:
            connections.close_all()

    with transaction.atomic():
        assert claim_next(running_job, first) is not None
        racer = threading.Thread(target=race)
        racer.start()
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
