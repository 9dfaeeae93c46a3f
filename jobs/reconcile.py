"""The safety net beat runs every half minute. Every step is idempotent, so sending twice is safe:

- nodes that missed their heartbeats give up the slots they held (jobs.workers.node; live nodes'
  heartbeats do it sooner);
- a running job whose slots have all stopped working on it gets its slot tasks sent again;
- a running job with every shard done is finished;
- a staging job whose attempt stopped renewing its lease is staged again (one streaming into its pass too);
- a job left submitted (its staging message lost) is sent to staging again;
- a finishing job with no output gets its assembly sent again, as does a job that ended early with
  finished shards and no output, for ten minutes;
- a pass that ended without its submitter told (the message lost, or the mail server away) is told
  again, once a quiet spell, for an hour;
- an ended job's S3 credentials and URL queries (a signature), its parts' too, are wiped if staging did not."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Max, Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from jobs import enqueue, lifecycle
from jobs.models import ENDED, STAGING, Job, Shard, State
from jobs.staging import sources
from jobs.workers.node import take_silent_nodes_offline

log = logging.getLogger(__name__)
FORGET_BATCH = 200  # ended jobs whose upload or secrets one run clears
PARTIAL_OUTPUT_RETRY = timedelta(minutes=10)
NOTIFY_RETRY = timedelta(hours=1)
# A part's location with its query still there, in Job.source_parts as the database writes it out as text: a `?`
# followed by neither the `…` that stands for a wiped query (SQLite keeps it as `\u2026`, PostgreSQL as itself) nor
# the quote that ends an empty one.
UNWIPED = r'\?[^\\…"]'


def reconcile() -> list[int]:
    now = timezone.now()
    quiet = now - timedelta(seconds=2 * settings.E31_SHARD_LEASE_SECONDS)
    touched = take_silent_nodes_offline()
    for job in Job.objects.filter(state=State.RUNNING, started_at__lt=quiet):
        shards = job.shards.all()
        if not shards.exclude(status__in=Shard.SETTLED).exists():
            if lifecycle.finish_pass(job):
                touched.append(job.pk)
            continue
        if shards.filter(status=Shard.Status.RUNNING, lease_until__gte=now).exists():
            continue
        last = shards.aggregate(last=Max("finished_at"))["last"]
        if last and last > quiet:
            continue
        for allocation in job.allocations.filter(held_to__isnull=True):
            lifecycle.send_runner(allocation)
        log.warning("job %s had no slot working on it; its slot tasks were sent again", job.pk)
        touched.append(job.pk)
    # A submitted job's staging message lost with Redis would leave it submitted for ever. One that
    # merely waits behind other stagings gets a spare message once a staging lease: the spare finds it
    # staging, or staged, and does nothing.
    forgotten = now - timedelta(seconds=settings.E31_STAGING_LEASE_SECONDS)
    for job in Job.objects.filter(state=State.SUBMITTED, modified__lt=forgotten):
        if Job.objects.filter(pk=job.pk, state=State.SUBMITTED, modified__lt=forgotten).update(modified=now):
            enqueue.stage(job.pk)
            log.warning("job %s waited %s submitted; its staging was sent again", job.pk, now - job.modified)
            touched.append(job.pk)
    for job in Job.objects.filter(STAGING, staging_lease_until__lt=now):
        enqueue.stage(job.pk)  # its attempt stopped renewing the lease: the next one takes over
        log.warning("job %s stopped staging; its staging was sent again", job.pk)
        touched.append(job.pk)
    for job in Job.objects.filter(state=State.FINISHING, output_path="", modified__lt=quiet):
        enqueue.assemble(job.pk)
        touched.append(job.pk)
    # A job that ended early keeps its finished shards as a partial output; its assembly's message
    # lost with Redis is sent again for a while (an assembly that fails for good is not retried for
    # ever), once a quiet spell (one still running is not sent a second).
    recently = Q(ended_at__gt=now - PARTIAL_OUTPUT_RETRY, ended_at__lt=quiet)
    partial = Job.objects.filter(recently, state__in=ENDED, output_path="", shards__status=Shard.Status.DONE)
    for job_id in partial.values_list("pk", flat=True).distinct():
        if Job.objects.filter(pk=job_id, modified__lt=quiet).update(modified=now):
            enqueue.assemble(job_id)
            touched.append(job_id)
    # The end of a pass is emailed by a task of its own: one lost with Redis, or one that met the mail
    # server away, is sent again (jobs.notify tells once however many arrive).
    told_late = Q(ended_at__gt=now - NOTIFY_RETRY, ended_at__lt=quiet, modified__lt=quiet)
    someone = Q(created_by__is_active=True) & ~Q(created_by__email="")
    untold = Job.objects.filter(told_late & someone, kind=Job.Kind.PASS, state__in=ENDED, notified_at=None)
    for job_id in untold.values_list("pk", flat=True):
        if Job.objects.filter(pk=job_id, modified__lt=quiet).update(modified=now):
            enqueue.notify_ended(job_id)
            touched.append(job_id)
    # Staging deletes a partner's upload and wipes their secrets when it ends; a job that ended before
    # staging ever ran (its message lost with Redis) is cleared here. A batch at a time: each job
    # cleared leaves the filter, and after an upgrade older jobs' upload paths are cleared over a few runs.
    signed = Q(source_kind=Job.Source.URL, source_uri__contains="?") & ~Q(source_uri__endswith="?…")
    left = ~Q(source_path="") | ~Q(source_secret="") | signed | Q(source_kind=Job.Source.URL, parts_text__regex=UNWIPED)
    ended = Job.objects.filter(state__in=ENDED).annotate(parts_text=Cast("source_parts", TextField()))
    for job in ended.filter(left).order_by("pk")[:FORGET_BATCH]:
        sources.forget(job)
    return touched
