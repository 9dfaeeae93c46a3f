"""Retention, as the partner chose it when submitting: the staged copy (and the model file the job
brought) purged when the job ends or the days chosen later; the output kept the days chosen, then
purged. Each purge is recorded on the job."""

import logging
from datetime import timedelta

from django.core.files.storage import default_storage
from django.db.models import Q
from django.utils import timezone

from jobs.models import ACTIVE, ENDED, Job

log = logging.getLogger(__name__)


def purge_due_at(job: Job):
    if job.ended_at is None:
        return None
    return job.ended_at + timedelta(days=job.retention_days)


def _due(job: Job, purged_at, due) -> bool:
    """Ended, not purged yet, and its days are up."""
    return job.state in ENDED and purged_at is None and due is not None and due <= timezone.now()


def purge_staged_copy_if_due(job_id: int) -> bool:
    """Delete the staged copy once the job has ended and its retention is up; record when."""
    job = Job.objects.get(pk=job_id)
    if not _due(job, job.staged_purged_at, purge_due_at(job)):
        return False
    if not job.staged_path:  # staging failed, or a pass took the sample's copy over
        _purge_model(job)
        return False
    # Still this job's copy: a pass may have taken its sample's copy over since the job was read.
    still_its_own = Job.objects.filter(pk=job.pk, staged_path=job.staged_path, staged_purged_at__isnull=True)
    if not still_its_own.update(staged_purged_at=timezone.now()):
        return False
    default_storage.delete(job.staged_path)
    log.info("purged the staged copy of job %s (%s)", job.pk, job.staged_path)
    _purge_model(job)
    return True


def _purge_model(job: Job) -> None:
    """The job's model file goes with its staged copy, unless another job still needs it (a sample and
    the pass it sized share one)."""
    if not job.model_path:
        return
    still_staged = Q(staged_purged_at__isnull=True) & ~Q(staged_path="")
    others = Job.objects.filter(model_path=job.model_path).exclude(pk=job.pk)
    if not others.filter(Q(state__in=ACTIVE) | still_staged).exists():
        default_storage.delete(job.model_path)


def output_due_at(job: Job):
    if job.ended_at is None or not job.output_path:
        return None
    return job.ended_at + timedelta(days=job.output_keep_days)


def purge_output_if_due(job_id: int) -> bool:
    """Delete the output once its days are up; record when, on the job and its timeline."""
    job = Job.objects.get(pk=job_id)
    if not _due(job, job.output_purged_at, output_due_at(job)):
        return False
    now = timezone.now()
    if not Job.objects.filter(pk=job.pk, output_purged_at__isnull=True).update(output_purged_at=now):
        return False
    for name in job.output_names:
        default_storage.delete(f"{job.output_path}/{name}")
    days = f"{job.output_keep_days} day{'s' if job.output_keep_days != 1 else ''}"
    job.events.create(state=job.state, at=now, message=f"output deleted: kept {days} after the job ended, as chosen")
    log.info("purged the output of job %s (%s)", job.pk, job.output_path)
    return True


def purge_expired() -> list[int]:
    """Every staged copy and output whose days are up: the ids of the jobs purged."""
    candidates = Job.objects.filter(state__in=ENDED, staged_purged_at__isnull=True).exclude(staged_path="")
    purged = [job.pk for job in candidates.only("pk") if purge_staged_copy_if_due(job.pk)]
    now = timezone.now()
    outputs = Job.objects.filter(state__in=ENDED, output_purged_at__isnull=True).exclude(output_path="")
    due = [
        pk
        for pk, ended, days in outputs.values_list("pk", "ended_at", "output_keep_days")
        if ended + timedelta(days=days) <= now
    ]
    return purged + [pk for pk in due if purge_output_if_due(pk)]
