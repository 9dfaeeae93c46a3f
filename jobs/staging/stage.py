"""The staging step, from its claim to its end: one attempt owns a job's staging under a lease, takes
the staged copy (staged_copy, or a sample's copy taken over), describes it and cuts its shards
(describe, shards), then records all of it and queues the job.

No compute is held while a job stages. When staging ends the job is queued and its staged copy,
layout, plan and shards are recorded; when it fails the job ends `failed` with the reason.
"""

import logging
import time
import uuid

from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Q
from django.template.defaultfilters import pluralize
from django.utils import timezone

from jobs import lifecycle, processors
from jobs.models import Job, Shard, State
from jobs.processors import ParamError
from jobs.signals import staging_finished
from jobs.staging import sources
from jobs.staging.describe import describe_and_cut
from jobs.staging.formats import FormatError
from jobs.staging.progress import StagingProgress, StagingStopped, lease_end
from jobs.staging.staged_copy import copy_to_job_storage

log = logging.getLogger(__name__)


def staged_name(job: Job, claim: str) -> str:
    """Where an attempt stages the job's data: its own name, so two attempts never write one file."""
    suffix = job.source_name.rsplit(".", 1)[-1].lower() if "." in job.source_name else "data"
    return f"{job.storage_prefix}/input/data-{claim[:12]}.{suffix}"


def take_sample_copy(job: Job) -> tuple[str, int, str]:
    """A pass sized by a sample takes the sample's staged copy over rather than staging the data
    again: the copy becomes the pass's own at once (so an attempt that takes over this staging finds
    it there), and the pass's retention governs it from then on."""
    if job.staged_path:
        return job.staged_path, job.input_bytes, job.input_sha256
    sample = Job.objects.get(pk=job.sample_id)
    with transaction.atomic():
        taken = (
            Job.objects.filter(pk=sample.pk, staged_path=sample.staged_path, staged_purged_at__isnull=True)
            .exclude(staged_path="")
            .update(staged_path="", modified=timezone.now())
        )
        if not taken:
            raise sources.SourceError(
                f"the staged copy of sample {sample.pk} is gone (purged, or taken by another pass); "
                "submit the data again."
            )
        Job.objects.filter(pk=job.pk).update(
            staged_path=sample.staged_path, input_bytes=sample.input_bytes, input_sha256=sample.input_sha256
        )
    return sample.staged_path, sample.input_bytes, sample.input_sha256


def _claim(job: Job) -> str | None:
    """Own the job's staging: start it, or take over one whose attempt stopped renewing its lease.

    None when the job is not to be staged here: another attempt holds a live lease (Redis delivered
    the task twice), or the job left staging (cancelled)."""
    claim, now = uuid.uuid4().hex, timezone.now()
    if lifecycle.begin_staging(job, claim, lease_end()):
        return claim
    lapsed = Q(staging_lease_until__lt=now) | Q(staging_lease_until__isnull=True)
    with transaction.atomic():
        if (
            not Job.objects.filter(pk=job.pk, state=State.STAGING)
            .filter(lapsed)
            .update(
                staging_claim=claim, staging_lease_until=lease_end(), staging_phase="", staging_done=0, modified=now
            )
        ):
            return None
        job.events.create(state=State.STAGING, at=now, message="staging again: the attempt before it stopped")
    return claim


def stage(job_id: int) -> None:
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return
    claim = _claim(job)
    if claim is None:
        if not Job.objects.filter(pk=job.pk, state__in=(State.SUBMITTED, State.STAGING)).exists():
            sources.forget(job)  # cancelled before staging began
        return
    began, started_at = time.monotonic(), timezone.now()
    target = staged_name(job, claim)
    try:
        progress = StagingProgress(job.pk, claim)
        scanned = None
        if job.sample_id:
            path, size, sha256 = take_sample_copy(job)
        else:
            path, size, sha256, scanned = copy_to_job_storage(job, target, progress)
        if job.expected_sha256 and sha256 != job.expected_sha256:
            raise sources.SourceError(
                f"checksum mismatch: the data's SHA-256 is {sha256}, not the {job.expected_sha256} given with the job."
            )
        layout, plan, total, shards = describe_and_cut(job, path, progress, scanned)
        plan = processors.get(job.work).prepare(plan, layout, job.params, job.model_path)
        progress.flush()
    except StagingStopped:
        default_storage.delete(target)
        if not Job.objects.filter(pk=job.pk, state=State.STAGING).exists():
            sources.forget(job)  # cancelled; a takeover still needs the upload
        return
    except (FormatError, ParamError, sources.SourceError) as error:
        _give_up(job, claim, target, f"Staging failed: {error}")
        return
    except OSError as error:
        log.exception("staging job %s failed", job.pk)
        _give_up(job, claim, target, f"Staging failed: could not read or store the data ({error.strerror or error}).")
        return
    except Exception as error:
        log.exception("staging job %s failed", job.pk)
        _give_up(
            job, claim, target, f"Staging failed: an internal error ({type(error).__name__}); the operators can see it."
        )
        return
    seconds = time.monotonic() - began
    with transaction.atomic():
        owned = Job.objects.filter(pk=job.pk, state=State.STAGING, staging_claim=claim).update(
            staged_path=path,
            input_bytes=size,
            input_sha256=sha256,
            input_format=layout["format"],
            layout=layout,
            plan=plan,
            records_total=total,
            staging_seconds=seconds,
            staging_lease_until=None,
        )
        if owned:
            Shard.objects.bulk_create(Shard(job=job, **shard) for shard in shards)
            finished = timezone.now()
            staged = staged_message(size, total, len(shards), sha256)
            owned = lifecycle.queue(job, finished, staged)
        if owned and not job.sample_id:  # the sample's own ledger entry shows what staging took
            staging_finished.send(sender=Job, job=job, size=size, started=started_at, finished=finished)
    if owned:
        sources.forget(job)
        return
    if job.sample_id:
        return  # the copy taken from the sample stays the job's own; its retention purges it
    # Cancelled, or taken over, while the last step ran: this attempt's copy has no use.
    default_storage.delete(path)
    if not Job.objects.filter(pk=job.pk, state=State.STAGING).exists():
        Job.objects.filter(pk=job.pk, staged_path="").update(staged_purged_at=timezone.now())
        sources.forget(job)


def _give_up(job: Job, claim: str, target: str, reason: str) -> None:
    """Fail the job, unless another attempt has taken its staging over meanwhile."""
    default_storage.delete(target)
    with transaction.atomic():
        if Job.objects.select_for_update().filter(pk=job.pk, state=State.STAGING, staging_claim=claim).exists():
            lifecycle.fail(job, reason)
            sources.forget(job)


def staged_message(size: int, records: int, shards: int, sha256: str) -> str:
    """The timeline's line for a job staged: what came in and how it was cut."""
    return (
        f"staged {size:,} byte{pluralize(size)}, {records:,} record{pluralize(records)} in {shards} "
        f"shard{pluralize(shards)}, sha256 {sha256[:12]}…"
    )
