"""Celery tasks. Each takes ids, re-reads the database, and is safe to run twice.

All go to the control queue but run_slot, which is sent to the queue of the slot it runs on."""

import logging
import time

from celery import shared_task
from celery.signals import worker_init
from django.conf import settings
from django.utils import timezone

from jobs import history, lifecycle, notify, processors, retention, scheduling
from jobs.models import Job, State
from jobs.outputs.assemble import assemble as assemble_output
from jobs.reconcile import reconcile as reconcile_jobs
from jobs.scheduling import promises
from jobs.uploads import resumable
from jobs.workers.runner import run_slot as run_slot_loop

log = logging.getLogger(__name__)


@shared_task
def stage(job_id: int) -> None:
    from jobs.staging.stage import stage as stage_job  # noqa: PLC0415 (numba's scan: loaded where jobs stage)

    stage_job(job_id)


@worker_init.connect
def warm_the_staging_scan(sender, **kwargs) -> None:
    """The control worker stages: it readies the scan before it forks its pool, which inherits it."""
    if sender.hostname.startswith("control@"):
        from jobs.staging import scankernel  # noqa: PLC0415 (numba: the slots' and webhooks' workers never load it)

        scankernel.warm()


@worker_init.connect
def warm_the_slot(sender, **kwargs) -> None:
    """A slot's worker imports its work kinds' libraries before it forks its pool and counts online."""
    if sender.hostname.startswith("slot") and settings.E31_WARM_SLOTS:
        began = time.monotonic()
        kinds = processors.warm_runnable()
        log.info(
            "%s: the libraries of %s imported in %.1f s", sender.hostname, ", ".join(kinds), time.monotonic() - began
        )


@shared_task
def schedule() -> list[int]:
    """A pass, then the queue's figures worked out again if it changed (jobs.queue_figures), and with them the
    deadlines promised at submit checked (jobs.scheduling.promises): at most once a change or REFRESH_SECONDS."""
    started = scheduling.schedule()
    if scheduling.refresh_queue_figures():
        promises.check()
    return started


@shared_task
def run_slot(job_id: int, allocation_id: int, runner: str = "") -> str:
    """Sent to the queue of the held slot itself; see jobs.workers.runner."""
    return run_slot_loop(job_id, allocation_id, runner)


@shared_task
def assemble(job_id: int) -> bool:
    try:
        return assemble_output(job_id)
    except Exception as error:
        # A job must not stay `finishing` for ever: it fails, naming the error, and keeps its shards.
        log.exception("assembling the output of job %s failed", job_id)
        lifecycle.fail(Job.objects.get(pk=job_id), f"Assembling the output failed: {type(error).__name__}: {error}")
        return False


@shared_task
def enforce_time_limits() -> list[int]:
    """Running jobs past their time limit (or deadline) time out; waiting ones past their deadline fail."""
    ended = []
    for job in Job.objects.filter(state=State.RUNNING):
        if job.time_limit_passed() and lifecycle.time_out(job):
            ended.append(job.pk)
    now = timezone.now()
    for job in Job.objects.filter(state__in=lifecycle.WAITING, deadline__lte=now):
        if lifecycle.miss_deadline(job):
            ended.append(job.pk)
    return ended


@shared_task
def notify_ended(job_id: int) -> bool:
    return notify.job_ended(job_id)


@shared_task
def reconcile() -> list[int]:
    return reconcile_jobs()


@shared_task
def purge_staged_copy_if_due(job_id: int) -> bool:
    return retention.purge_staged_copy_if_due(job_id)


@shared_task
def purge_expired() -> list[int]:
    history.prune_readings(timezone.now())
    return retention.purge_expired()


@shared_task
def sample_fleet() -> int:
    """Once a minute: each node's slots online, held and in use, and the queue's length, for the console."""
    return history.sample_fleet(timezone.now())


@shared_task
def purge_abandoned_uploads() -> int:
    return resumable.purge_abandoned()
