"""Staging writes its progress to the job as it goes, at most twice a second."""

import pytest
from django.utils import timezone

from jobs import lifecycle
from jobs.models import Job, State
from jobs.staging import progress as staging_progress
from jobs.staging.progress import StagingProgress, StagingStopped
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def test_it_writes_the_phase_at_once_and_the_bytes_at_most_twice_a_second(organisation, monkeypatch):
    job = make_job(organisation, State.STAGING)
    clock = iter([100.0, 100.1, 100.2, 100.7, 100.7, 100.8, 100.9, 100.9])
    monkeypatch.setattr(staging_progress.time, "monotonic", lambda: next(clock))
    progress = StagingProgress(job.pk, job.staging_claim)
    progress.phase("copying", 1000)  # t=100.0
    progress.advance(100)  # t=100.1: too soon to write
    job.refresh_from_db()
    assert (job.staging_phase, job.staging_done, job.staging_total) == ("copying", 0, 1000)
    progress.advance(300)  # t=100.2: still too soon
    progress.advance(600)  # t=100.7: written
    job.refresh_from_db()
    assert job.staging_done == 600
    assert job.staging_percent == 60
    progress.advance(1000)  # t=100.8: too soon, until flushed
    progress.flush()
    job.refresh_from_db()
    assert job.staging_done == 1000
    progress.phase("reading", 1000)  # t=100.9: the last phase, done before a write was due
    Job.objects.filter(pk=job.pk).update(state=State.QUEUED, queued_at=timezone.now())
    job.refresh_from_db()
    assert (job.staging_done, job.staging_percent) == (0, 100), "a staged job's staging is done"


def test_it_stops_the_staging_of_a_cancelled_job(organisation):
    job = make_job(organisation, State.STAGING)
    progress = StagingProgress(job.pk, job.staging_claim)
    progress.phase("copying", 1000)
    lifecycle.cancel(job)
    progress.advance(10)
    with pytest.raises(StagingStopped):
        progress.flush()
