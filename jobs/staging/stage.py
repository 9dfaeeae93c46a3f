"""The staging step, from its claim to its end: one attempt owns a job's staging under a lease, takes
the staged copy (staged_copy, or a sample's copy taken over), describes it and cuts its shards
(describe, shards), then records all of it and queues the job. Where the data streams (streaming), its
shards are recorded as the copy grows and the job is queued with the first of them: the pass can run
while the rest arrives, and the end of staging records the last shards and what came in.

No compute is held while a job stages. When staging ends the job is queued and its staged copy,
layout, plan and shards are recorded; when it fails the job ends `failed` with the reason, even once
its pass has started on the shards staged (the hours served stay billed, and what ran is its output).
"""

import functools
import logging
import time
import uuid

from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Q
from django.template.defaultfilters import pluralize
from django.utils import timezone

from jobs import enqueue, lifecycle, processors
from jobs.models import STAGING, Job, Shard, State
from jobs.processors import ParamError
from jobs.signals import staging_finished
from jobs.staging import compressed, parts, sources, streaming
from jobs.staging.describe import describe_and_cut
from jobs.staging.formats import FormatError
from jobs.staging.progress import StagingProgress, StagingStopped, lease_end
from jobs.staging.staged_copy import copy_to_job_storage

log = logging.getLogger(__name__)


def staged_name(job: Job, claim: str) -> str:
    """Where an attempt stages the job's data: its own name, so two attempts never write one file. A
    compressed source's copy is uncompressed, and named so (S3 storage would mark a .gz as gzip-encoded)."""
    name = compressed.plain_name(job.source_name)
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else "data"
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
            staged_path=sample.staged_path, input_bytes=sample.input_bytes, input_sha256=sample.input_sha256,
            input_compression=sample.input_compression, sent_bytes=sample.sent_bytes,
        )  # fmt: skip
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
        state = Job.objects.select_for_update().filter(STAGING, lapsed, pk=job.pk).values_list("state", flat=True)
        if not (state := state.first()):
            return None
        Job.objects.filter(pk=job.pk).update(
            staging_claim=claim, staging_lease_until=lease_end(), staging_phase="", staging_done=0, modified=now
        )
        job.events.create(state=state, at=now, message="staging again: the attempt before it stopped")
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
    progress = StagingProgress(job.pk, claim)
    stream = streaming.Stream(job, claim, target) if streaming.streams(job) else None
    give_up = functools.partial(_give_up, job, claim, target, stream, progress)
    try:
        scanned = None
        if job.sample_id:
            path, size, sha256 = take_sample_copy(job)
        elif stream:
            path, size, sha256, follower = _copy_streaming(job, stream, target, progress, began)
            if follower is not None:
                _check_sha256(job, sha256)
                _end_stream(job, stream, follower, (path, size, sha256), time.monotonic() - began, started_at)
                return
        else:
            path, size, sha256, scanned = copy_to_job_storage(job, target, progress)
        _check_sha256(job, sha256)
        layout, plan, total, shards = describe_and_cut(job, path, progress, scanned)
        plan = processors.get(job.work).prepare(plan, layout, job.params, job.model_path)
        progress.flush()
    except StagingStopped:
        if not (stream and stream.queued):
            default_storage.delete(target)  # a copy the pass reads from stays the job's until retention purges it
        if not Job.objects.filter(pk=job.pk, state=State.STAGING).exists():
            sources.forget(job)  # cancelled; a takeover still needs the upload
        return
    except (FormatError, ParamError, sources.SourceError, parts.PartError) as error:
        give_up(f"{error}")
        return
    except OSError as error:
        log.exception("staging job %s failed", job.pk)
        give_up(f"could not read or store the data ({error.strerror or error}).")
        return
    except Exception as error:
        log.exception("staging job %s failed", job.pk)
        give_up(f"an internal error ({type(error).__name__}); the operators can see it.")
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


def _check_sha256(job: Job, sha256: str) -> None:
    if job.expected_sha256 and sha256 != job.expected_sha256:
        raise sources.SourceError(
            f"checksum mismatch: the data's SHA-256 is {sha256}, not the {job.expected_sha256} given with the job."
        )


def _give_up(
    job: Job, claim: str, target: str, stream: streaming.Stream | None, progress: StagingProgress, error: str
) -> None:
    """Fail the job, unless another attempt has taken its staging over meanwhile. A job whose pass had started
    on its staged shards keeps their output (partial) and its copy, which the shards that failed are read from."""
    streamed = stream is not None and stream.queued
    reason = f"Staging failed: {error}"
    if streamed:
        reason = (
            f"Staging failed after {progress.done:,} bytes of the data were staged, once the pass had started: {error} "
            "The output of the shards that ran can be downloaded; its manifest says it is partial."
        )
    else:
        default_storage.delete(target)
    with transaction.atomic():
        owned = stream.owned() if stream else Job.objects.filter(pk=job.pk, state=State.STAGING, staging_claim=claim)
        if owned.select_for_update().exists():
            owned.update(streaming=False, stream_ready=False, staging_lease_until=None)
            lifecycle.fail(job, reason)
            sources.forget(job)


def _copy_streaming(
    job: Job, stream: streaming.Stream, target: str, progress: StagingProgress, began: float
) -> tuple[str, int, str, streaming.Follower | None]:
    """Copy the data while a follower cuts the copy into shards behind the writer; the follower, once it
    has read every record, when the pass streamed (None: the data did not stream, and is described whole)."""

    def pace() -> None:  # from the follower's thread, also while the source pauses: its bytes so far are shown
        progress.flush()
        stream.pace(progress.done, progress.total, began, _size_of(target))

    sizing = {key: stream.layout[key] for key in streaming.SIZING if key in stream.layout}
    source = (lambda: progress.total, lambda: progress.done)
    follower = streaming.Follower(job, target, source, stream.add, pace, sizing)
    follower.start()
    try:
        path, size, sha256, _ = copy_to_job_storage(job, target, progress, scan=False)
    except BaseException:
        follower.stopped.set()
        follower.join()
        raise
    follower.complete.set()
    follower.join()
    if follower.error and stream.queued:
        raise follower.error
    if not stream.queued or follower.declined or follower.error:
        return path, size, sha256, None  # described whole, as any job: an error is found there again and worded
    return path, size, sha256, follower


def _size_of(path: str) -> int:
    try:
        return default_storage.size(path)
    except OSError:
        return 0


def _end_stream(
    job: Job, stream: streaming.Stream, follower: streaming.Follower, staged: tuple, seconds: float, started_at
) -> None:
    """The end of a staging that streamed: the last shards, the data's size, SHA-256 and records, and its
    ledger entry, in one transaction that also ends `streaming` (a slot that then finds no shard left finishes
    the pass). Nothing, when the job left staging meanwhile (cancelled, failed)."""
    path, size, sha256 = staged
    rest = follower.rest()
    with transaction.atomic():
        state = stream.owned().select_for_update().values_list("state", flat=True).first()
        if state is None:
            return
        stream.owned().update(
            staged_path=path, input_bytes=size, input_sha256=sha256, layout=follower.final_layout(stream.layout),
            records_total=follower.records, staging_seconds=seconds, staging_lease_until=None, streaming=False,
            stream_ready=False, modified=timezone.now(),
        )  # fmt: skip
        Shard.objects.bulk_create(Shard(job=job, **shard) for shard in rest)
        finished = timezone.now()
        count = follower.emitted + len(rest)
        job.events.create(state=state, at=finished, message=staged_message(size, follower.records, count, sha256))
        staging_finished.send(sender=Job, job=job, size=size, started=started_at, finished=finished)
        transaction.on_commit(enqueue.schedule)
    if stream.job.staged_path and stream.job.staged_path != path:
        default_storage.delete(stream.job.staged_path)  # a copy an attempt before left, which no shard reads now
    sources.forget(job)


def staged_message(size: int, records: int, shards: int, sha256: str) -> str:
    """The timeline's line for a job staged: what came in and how it was cut."""
    return (
        f"staged {size:,} byte{pluralize(size)}, {records:,} record{pluralize(records)} in {shards} "
        f"shard{pluralize(shards)}, sha256 {sha256[:12]}…"
    )
