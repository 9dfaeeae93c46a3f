"""Emails about jobs: when a pass ends, to whoever submitted it."""

import logging
import smtplib

from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from jobs.facts import JobFacts
from jobs.models import Job
from jobs.services import jobs_for_user

log = logging.getLogger(__name__)


def job_ended(job_id: int) -> bool:
    """Tell the partner who submitted a pass how it ended, once; False when there is nobody to tell (a
    job from the CLI, a user without an email or no longer in the job's organisation, a sample), when
    it was told already, or when the email could not be sent, which only logs (and leaves it untold, for
    jobs.reconcile to try again): a job's end never waits on mail."""
    job = Job.objects.select_related("created_by").filter(pk=job_id).first()
    if job is None or job.kind != Job.Kind.PASS or not job.ended or not _still_member(job):
        return False
    if not Job.objects.filter(pk=job.pk, notified_at=None).update(notified_at=timezone.now()):
        return False  # a second delivery of the task: the first one told them
    page = settings.E31_PUBLIC_URL + reverse("jobs:detail", args=[job.pk])
    context = {
        "job": job,
        "facts": JobFacts(job),
        "page": page,
        "receipt": settings.E31_PUBLIC_URL + reverse("billing:receipt", args=[job.pk]),
    }
    subject = f"Job #{job.pk} {job.get_state_display().lower()}: {job.work} over {job.source_name}"
    try:
        send_mail(subject, render_to_string("jobs/email/ended.txt", context), None, [job.created_by.email])
    except (OSError, smtplib.SMTPException) as error:
        log.warning("job %s: the email to %s was not sent: %s", job.pk, job.created_by.email, error)
        Job.objects.filter(pk=job.pk).update(notified_at=None)  # reconcile sends it again for a while
        return False
    return True


def _still_member(job: Job) -> bool:
    """Its submitter, active and with an email, may still see it (the portal's own access rule)."""
    user = job.created_by
    return bool(user and user.is_active and user.email and jobs_for_user(user).filter(pk=job.pk).exists())
