"""One attempt stages a job at a time: a task delivered twice leaves a live staging alone, a staging
whose attempt stopped renewing its lease is taken over, and the stale attempt changes nothing."""

from datetime import timedelta

import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from jobs.models import Job, State
from jobs.reconcile import reconcile
from jobs.staging import stage
from jobs.staging.progress import StagingProgress, StagingStopped
from tests.support import job_form

pytestmark = pytest.mark.django_db


@pytest.fixture
def staging_job(partner_client, online_slots):
    """A submitted job caught mid-staging by an attempt named `old`."""
    assert partner_client.post("/jobs/new/", job_form()).status_code == 302
    job = Job.objects.get()
    Job.objects.filter(pk=job.pk).update(state=State.STAGING, staging_claim="old")
    return job


def lease(job, seconds: float) -> Job:
    Job.objects.filter(pk=job.pk).update(staging_lease_until=timezone.now() + timedelta(seconds=seconds))
    job.refresh_from_db()
    return job


def test_a_second_delivery_leaves_a_staging_with_a_live_lease_alone(staging_job):
    job = lease(staging_job, 60)
    stage.stage(job.pk)
    job.refresh_from_db()
    assert (job.state, job.staging_claim, job.staged_path) == (State.STAGING, "old", "")
    assert default_storage.exists(job.source_path), "the upload is kept for the attempt under way"


def test_a_staging_whose_lease_ran_out_is_taken_over_and_finished(staging_job):
    job = lease(staging_job, -1)
    upload = job.source_path
    stage.stage(job.pk)
    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert job.staging_claim not in ("", "old")
    assert job.staged_path.endswith(f"/input/data-{job.staging_claim[:12]}.csv")
    assert job.staging_lease_until is None
    assert job.records_total == 5000 and job.shards.count() > 0
    messages = list(job.events.values_list("message", flat=True))
    assert "staging again: the attempt before it stopped" in messages
    assert not default_storage.exists(upload) and not job.source_path, "the upload goes once it is staged"


def test_the_attempt_that_lost_its_claim_stops_at_its_next_write(staging_job):
    job = lease(staging_job, 60)
    stale = StagingProgress(job.pk, "old")
    stale.phase("copying", 1000)
    Job.objects.filter(pk=job.pk).update(staging_claim="new")
    with pytest.raises(StagingStopped):
        stale.flush()
    job.refresh_from_db()
    assert job.staging_claim == "new"


def test_the_attempt_that_lost_its_claim_cannot_fail_the_job(staging_job):
    job = lease(staging_job, 60)
    Job.objects.filter(pk=job.pk).update(staging_claim="new")
    stage._give_up(job, "old", stage.staged_name(job, "old"), None, StagingProgress(job.pk, "old"), "an error")
    job.refresh_from_db()
    assert (job.state, job.error) == (State.STAGING, "")
    assert default_storage.exists(job.source_path)


def test_the_safety_net_sends_a_lapsed_staging_again(staging_job, redis_server, django_capture_on_commit_callbacks):
    redis_server.delete("control")
    try:
        lease(staging_job, 60)
        with django_capture_on_commit_callbacks(execute=True):  # beat runs it outside a transaction
            assert reconcile() == []
            lease(staging_job, -1)
            assert reconcile() == [staging_job.pk]
        assert redis_server.llen("control") == 1
    finally:
        redis_server.delete("control")
