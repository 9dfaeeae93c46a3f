"""Retention of the staged copy: purged when the job ends, or the days the partner chose later."""

import logging
from datetime import timedelta

from django.core.files.storage import default_storage
from django.utils import timezone

from jobs.models import ENDED, Job

log = logging.getLogger(__name__)


def purge_due_at(job: Job):
    if job.ended_at is None:
        return None
    return job.ended_at + timedelta(days=job.retention_days)


def purge_staged_copy_if_due(job_id: int) -> bool:
    """Delete the staged copy once the job has ended and its retention is up; record when."""
    job = Job.objects.get(pk=job_id)
    due = purge_due_at(job)
    if job.state not in ENDED or not job.staged_path or job.staged_purged_at or due is None or due > timezone.now():
        return False
    if not Job.objects.filter(pk=job.pk, staged_purged_at__isnull=True).update(staged_purged_at=timezone.now()):
        return False
    default_storage.delete(job.staged_path)
    log.info("purged the staged copy of job %s (%s)", job.pk, job.staged_path)
    return True


def purge_expired() -> list[int]:
    candidates = Job.objects.filter(state__in=ENDED, staged_purged_at__isnull=True).exclude(staged_path="")
    return [job.pk for job in candidates.only("pk") if purge_staged_copy_if_due(job.pk)]
