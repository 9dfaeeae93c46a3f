"""The safety net: a running job that no slot works on gets its slot tasks again (through the real
broker), and a running job whose shards are all done is finished."""

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import LedgerEntry
from jobs import lifecycle
from jobs.models import Job, Shard, State
from jobs.reconcile import reconcile
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def stalled_job(organisation, online_slots):
    job = make_job(organisation, State.QUEUED, gpus=2)
    lifecycle.start_hold(job, online_slots[:2])
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=10))
    for index in range(2):
        Shard.objects.create(
            job=job, index=index, first_record=index * 5 + 1, record_count=5, first_line=index * 5 + 2,
            start_byte=index * 50, end_byte=(index + 1) * 50,
        )  # fmt: skip
    return job


def test_it_sends_the_slot_tasks_again_when_no_slot_works_on_a_running_job(
    stalled_job, online_slots, redis_server, django_capture_on_commit_callbacks
):
    queues = [slot.queue for slot in online_slots[:2]]
    redis_server.delete(*queues)
    try:
        with django_capture_on_commit_callbacks(execute=True):  # beat runs it outside a transaction
            assert reconcile() == [stalled_job.pk]
        assert [redis_server.llen(queue) for queue in queues] == [1, 1]
    finally:
        redis_server.delete(*queues)


def test_it_leaves_a_job_alone_while_a_slot_holds_a_live_lease(stalled_job):
    Shard.objects.filter(job=stalled_job, index=0).update(
        status=Shard.Status.RUNNING, lease_until=timezone.now() + timedelta(seconds=30)
    )
    assert reconcile() == []


def test_it_finishes_a_running_job_whose_shards_are_all_done(stalled_job):
    Shard.objects.filter(job=stalled_job).update(status=Shard.Status.DONE, finished_at=timezone.now())
    assert reconcile() == [stalled_job.pk]
    stalled_job.refresh_from_db()
    assert stalled_job.state == State.FINISHING
    assert LedgerEntry.objects.filter(job=stalled_job, kind=LedgerEntry.Kind.HOLD).exists()


def test_a_job_left_submitted_without_its_staging_message_is_sent_to_staging_again(
    organisation, redis_server, django_capture_on_commit_callbacks
):
    """Its message was lost with Redis: without the safety net it would stay submitted for ever."""
    old = timezone.now() - timedelta(hours=1)
    lost, waiting = make_job(organisation), make_job(organisation, source_name="b.csv")
    Job.objects.filter(pk=lost.pk).update(modified=old)
    redis_server.delete("control")
    try:
        with django_capture_on_commit_callbacks(execute=True):  # beat runs it outside a transaction
            assert reconcile() == [lost.pk], "a job submitted a moment ago still has its message on its way"
            assert reconcile() == [], "one spare message, not one every half minute"
        assert redis_server.llen("control") == 1
        assert redis_server.llen("control") == 1
    finally:
        redis_server.delete("control")
    assert Job.objects.get(pk=waiting.pk).state == State.SUBMITTED


def test_a_lost_staging_message_is_sent_again_after_one_staging_lease(
    organisation, redis_server, settings, django_capture_on_commit_callbacks
):
    lease = timedelta(seconds=settings.E31_STAGING_LEASE_SECONDS)
    lost, recent = make_job(organisation), make_job(organisation, source_name="b.csv")
    Job.objects.filter(pk=lost.pk).update(modified=timezone.now() - lease - timedelta(seconds=1))
    Job.objects.filter(pk=recent.pk).update(modified=timezone.now() - lease / 2)
    redis_server.delete("control")
    try:
        with django_capture_on_commit_callbacks(execute=True):  # beat runs it outside a transaction
            assert reconcile() == [lost.pk], "a lease, not ten"
        assert redis_server.llen("control") == 1
    finally:
        redis_server.delete("control")


def test_a_job_that_ended_early_gets_its_partial_outputs_assembly_again_for_a_while(
    stalled_job, redis_server, django_capture_on_commit_callbacks
):
    """Its assembly's message was lost with Redis: the finished shards would never become its output."""
    Shard.objects.filter(job=stalled_job, index=0).update(status=Shard.Status.DONE, finished_at=timezone.now())
    assert lifecycle.cancel(stalled_job)
    redis_server.delete("control")
    try:
        a_minute_ago = timezone.now() - timedelta(minutes=1)
        Job.objects.filter(pk=stalled_job.pk).update(ended_at=a_minute_ago, modified=a_minute_ago)
        with django_capture_on_commit_callbacks(execute=True):
            assert reconcile() == [stalled_job.pk]
        assert redis_server.llen("control") == 1
        assert reconcile() == [], "not again while the one sent may still run"
        Job.objects.filter(pk=stalled_job.pk).update(ended_at=timezone.now() - timedelta(hours=1))
        assert reconcile() == [], "not for ever: an assembly that fails for good is not sent again and again"
    finally:
        redis_server.delete("control")


def test_a_pass_whose_end_was_never_told_is_told_again_for_an_hour(
    organisation, partner, redis_server, django_capture_on_commit_callbacks
):
    """The notify_ended message was lost with Redis: the partner would never hear how their pass ended."""
    untold = make_job(organisation, State.SUCCEEDED, created_by=partner)
    told = make_job(organisation, State.FAILED, created_by=partner, source_name="b.csv")
    make_job(organisation, State.SUCCEEDED, source_name="c.csv")  # from the CLI: nobody to tell
    make_job(organisation, State.SUCCEEDED, created_by=partner, kind=Job.Kind.SAMPLE, source_name="d.csv")
    a_while_ago = timezone.now() - timedelta(minutes=5)
    Job.objects.all().update(ended_at=a_while_ago, modified=a_while_ago)
    Job.objects.filter(pk=told.pk).update(notified_at=a_while_ago)
    redis_server.delete("control")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert reconcile() == [untold.pk]
            assert reconcile() == [], "not again while the one sent may still run"
        assert redis_server.llen("control") == 1
        Job.objects.filter(pk=untold.pk).update(ended_at=timezone.now() - timedelta(hours=2), modified=a_while_ago)
        assert reconcile() == [], "not for ever: a mail server away for hours is not tried every half minute"
    finally:
        redis_server.delete("control")
