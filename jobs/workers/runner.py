"""What a held slot does: take the next unprocessed shard of its job until none is left.

A shard is claimed with a conditional UPDATE and a lease; while it runs, the lease is renewed and the
job checked to run after a batch, once a second at most, and by a thread of its own however long a
batch takes. A slot that dies leaves its shard to be taken again when the lease runs out (or at once,
when the same slot comes back). A shard's output is written under its claim token and only the claim
that marks the shard done is kept, so a shard done twice counts once. Its progress is counted the same way:
the renewal after a batch writes the records its claim has done so far, and a claim taken again starts at 0.
"""

import functools
import logging
import os
import resource
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
from django.conf import settings
from django.core.files.storage import default_storage
from django.db import DatabaseError, connection
from django.db.models import F, Q, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from jobs import enqueue, lifecycle, processors
from jobs.models import Allocation, Gpu, Job, Shard, State
from jobs.outputs import RECORD_COLUMN, REJECT_SCHEMA, ScratchFile, context_for, output_schema
from jobs.processors import Record
from jobs.staging.formats import FormatError
from jobs.staging.shards import batched, read_shard

log = logging.getLogger(__name__)

# A shard's claim is renewed (the job checked to run, the records done so far written) after a batch once
# this long has passed since the last time: often enough to stop within a second of a cancel, and one write
# a second at most rather than one a batch, which on a fast slot would be most of its time outside the work.
CLAIM_CHECK_SECONDS = 1.0


EXIT_SPENT = 75  # a slot process that ends itself, its hold handed over (EX_TEMPFAIL)


class ShardLost(Exception):
    """The shard's claim ended while it ran: the job stopped, or another slot took it over."""


def run_slot(job_id: int, allocation_id: int, runner: str = "") -> str:
    """Process the job's shards on this slot for one time slice; say why the slice ended. `runner` is
    the token the hold's task was sent with: a task whose token is no longer the hold's stops."""
    try:
        allocation = Allocation.objects.select_related("gpu", "job").get(pk=allocation_id, job_id=job_id)
    except Allocation.DoesNotExist:
        return "gone"
    job, gpu = allocation.job, allocation.gpu
    deadline = time.monotonic() + settings.E31_SLOT_SLICE_SECONDS
    while True:
        if job.time_limit_passed():
            lifecycle.time_out(job)  # at once, not at beat's next look: the meter stops at the limit
        if not _report(allocation_id, runner):
            held = Allocation.objects.filter(pk=allocation_id, held_to__isnull=True).exists()
            return "superseded" if held else "released"
        if time.monotonic() > deadline:
            return _hand_over(job_id, allocation_id, runner, gpu.queue)
        if asked_back(job, allocation_id) and lifecycle.give_back(allocation_id):
            return "given back"
        if job.kind == Job.Kind.SAMPLE:
            skip_past_budget(job)
        claimed = claim_next(job, gpu)
        if claimed is None:
            # Read before the shards: the end of staging commits its last shards as it clears `streaming`.
            if Job.objects.filter(pk=job.pk, streaming=True).exists():
                if lifecycle.give_back(allocation_id, idle=True):
                    return "given back"  # no staged shard left for it: no slot is held while bytes arrive
            elif not Shard.objects.filter(job=job).exclude(status__in=Shard.SETTLED).exists():
                lifecycle.finish_pass(job)
                return "finished"
            if job.flexible and lifecycle.give_back(allocation_id, idle=True):
                return "given back"  # nothing left for it: a flexible job holds no slot it cannot use
            time.sleep(0.5)  # the last shards run on other slots; stay to take any they lose
            continue
        shard, token = claimed
        try:
            process_shard(job, shard, token, gpu, hold=(allocation_id, runner))
        except ShardLost:
            continue
        except FormatError as error:
            lifecycle.fail(job, f"Shard {shard.index}: {error}")
            return "failed"
        except processors.ProcessSpent as error:
            Shard.objects.filter(pk=shard.pk, claim=token).update(
                status=Shard.Status.PENDING, claim="", lease_until=None, attempts=F("attempts") - 1
            )
            _end_process(job_id, allocation_id, runner, gpu, str(error))
        except Exception as error:
            log.exception("shard %s of job %s failed", shard.index, job.pk)
            Shard.objects.filter(pk=shard.pk, claim=token).update(
                status=Shard.Status.PENDING,
                claim="",
                lease_until=None,
                error=traceback.format_exc(limit=5),
                failed_on=gpu,
            )
            if processors.spent(error):
                _end_process(job_id, allocation_id, runner, gpu, str(error))


def _end_process(job_id: int, allocation_id: int, runner: str, gpu: Gpu, why: str) -> None:
    """End this slot process, which can run no more work: the hold's next task goes to the slot's queue
    first, so that the fresh process its worker starts in its place takes the hold over at once."""
    log.warning("the process of %s ends (%s); a fresh one takes job %s over", gpu, why, job_id)
    _hand_over(job_id, allocation_id, runner, gpu.queue)
    logging.shutdown()
    os._exit(EXIT_SPENT)


def _report(allocation_id: int, runner: str) -> bool:
    """This task still serves the hold: say so (the node sends a new task for a hold nobody reports
    on). False when the hold ended, or a newer task serves it."""
    serving = Allocation.objects.filter(pk=allocation_id, held_to__isnull=True, runner=runner)
    return bool(serving.update(runner_seen=timezone.now()))


def _hand_over(job_id: int, allocation_id: int, runner: str, queue: str) -> str:
    """End the slice: the hold's next task gets a token of its own, so a copy of this task's message
    (restored by the broker after an acknowledgement lost) stops rather than run beside it."""
    successor = uuid.uuid4().hex
    serving = Allocation.objects.filter(pk=allocation_id, held_to__isnull=True, runner=runner)
    if not serving.update(runner=successor, runner_seen=timezone.now()):
        return "superseded"
    enqueue.run_slot(job_id, allocation_id, successor, queue)
    return "continued"


def asked_back(job: Job, allocation_id: int) -> bool:
    """A turn at a shard boundary: the job's limit's fields read again (a flexible job's width moves its
    budget's end), and whether this slot was asked back (by the scheduler, for a flexible job; for a fixed
    one whose other slot found no staged shard, lifecycle.give_back), in one query."""
    hold = Allocation.objects.filter(pk=allocation_id).order_by()  # one row: no join for the default ordering
    rows = hold.values_list("give_back", "job__budget_ends_at", "job__deadline")
    asked, job.budget_ends_at, job.deadline = next(iter(rows), (False, job.budget_ends_at, job.deadline))
    return asked


def skip_past_budget(job: Job) -> int:
    """Once a sample has run E31_SAMPLE_SECONDS, the shards nobody has taken yet are not part of it;
    but it runs two shards at least, so that its steady speed shows apart from its start-up."""
    if job.started_at is None or timezone.now() < job.started_at + timedelta(seconds=settings.E31_SAMPLE_SECONDS):
        return 0
    if Shard.objects.filter(job=job, status=Shard.Status.DONE).count() < 2:
        return 0
    return Shard.objects.filter(job=job, status=Shard.Status.PENDING).update(status=Shard.Status.SKIPPED)


def claim_next(job: Job, gpu: Gpu) -> tuple[Shard, str] | None:
    """Claim the first shard nobody is working on; fail the job when one has used all its attempts."""
    now = timezone.now()
    if claimed := _claim_first(job, gpu, now):
        return claimed  # the common case, in one statement; the rest settles what it leaves
    claimable = Q(status=Shard.Status.PENDING) | Q(status=Shard.Status.RUNNING, lease_until__lt=now)
    # A running shard of this very slot was left by a worker process that died on it.
    claimable |= Q(status=Shard.Status.RUNNING, gpu=gpu)
    candidates = Shard.objects.filter(job=job).filter(claimable).order_by("index")
    first = list(candidates[:8])
    failed_here = any(shard.status == Shard.Status.PENDING and shard.failed_on_id == gpu.pk for shard in first)
    if failed_here and _another_live_slot(job, gpu):  # asked only then: most claims find no failed shard
        first = list(candidates.exclude(status=Shard.Status.PENDING, failed_on=gpu)[:8])  # retried elsewhere
    for shard in first:
        if shard.attempts >= settings.E31_SHARD_MAX_ATTEMPTS:
            reason = f"Shard {shard.index} failed {shard.attempts} times: {shard.last_error}"
            if not job.allow_partial:
                lifecycle.fail(job, reason)
                return None
            # Partial output allowed: the shard is left out; assembly lists its records as rejected.
            Shard.objects.filter(pk=shard.pk, status=shard.status, claim=shard.claim, attempts=shard.attempts).update(
                status=Shard.Status.FAILED, claim="", lease_until=None
            )
            continue
        token = uuid.uuid4().hex
        won = (
            Shard.objects.filter(
                pk=shard.pk,
                status=shard.status,
                claim=shard.claim,
                attempts=shard.attempts,
                job_id__in=_running(job.pk),
            )
            .filter(job_id__in=_held_by(job.pk, gpu))
            .update(
                status=Shard.Status.RUNNING,
                claim=token,
                gpu=gpu,
                attempts=F("attempts") + 1,
                worker_pid=os.getpid(),
                lease_until=now + timedelta(seconds=settings.E31_SHARD_LEASE_SECONDS),
                started_at=now,
                records_done=0,  # a shard taken again counts its records over, not on top of the lost claim's
            )
        )
        if won:
            return shard, token
    return None


def _claim_first(job: Job, gpu: Gpu, now) -> tuple[Shard, str] | None:
    """The claim most turns make, as one UPDATE ... RETURNING: the first claimable shard, in the order and on
    the conditions of `claim_next`'s, taken when it has attempts left and did not fail on this slot. None
    when it has not, or there is none, or the job no longer runs on this slot: `claim_next` then reads its
    candidates and settles each. One statement rather than a read and a write, written out because a slot
    makes it at every shard boundary (docs/benchmarks.md: the ORM compiling the two was a third of a replay).
    PostgreSQL skips a shard another slot's claim has locked; SQLite runs one write at a time."""
    token = uuid.uuid4().hex
    lease = now + timedelta(seconds=settings.E31_SHARD_LEASE_SECONDS)
    at, lease = (connection.ops.adapt_datetimefield_value(value) for value in (now, lease))
    pending, running = Shard.Status.PENDING, Shard.Status.RUNNING
    params = [running, token, gpu.pk, os.getpid(), lease, at]  # SET
    params += [job.pk, pending, running, at, gpu.pk]  # the first claimable
    params += [settings.E31_SHARD_MAX_ATTEMPTS, pending, gpu.pk, job.pk, State.RUNNING, job.pk, gpu.pk]
    shards = list(Shard.objects.raw(_claim_sql(connection.vendor), params))
    return (shards[0], token) if shards else None


@functools.cache
def _claim_sql(vendor: str) -> str:
    """`_claim_first`'s statement for this database (`vendor` keys the cache), its tables named from the models."""
    name = connection.ops.quote_name
    shard, job, allocation = (name(model._meta.db_table) for model in (Shard, Job, Allocation))
    returning = ", ".join(name(field.column) for field in Shard._meta.concrete_fields)
    lock = " FOR UPDATE SKIP LOCKED" if connection.features.has_select_for_update_skip_locked else ""
    return (
        f"UPDATE {shard} SET status = %s, claim = %s, gpu_id = %s, attempts = attempts + 1, worker_pid = %s, "
        f"lease_until = %s, started_at = %s, records_done = 0 "
        f"WHERE id = (SELECT id FROM {shard} WHERE job_id = %s "
        f"AND (status = %s OR (status = %s AND (lease_until < %s OR gpu_id = %s))) "
        f"ORDER BY {name('index')} LIMIT 1{lock}) "
        f"AND attempts < %s AND (status <> %s OR failed_on_id IS NULL OR failed_on_id <> %s) "
        f"AND job_id IN (SELECT id FROM {job} WHERE id = %s AND state = %s) "
        f"AND job_id IN (SELECT job_id FROM {allocation} WHERE job_id = %s AND gpu_id = %s AND held_to IS NULL) "
        f"RETURNING {returning}"
    )


def _another_live_slot(job: Job, gpu: Gpu) -> bool:
    """Whether the job holds another slot that is online, to retry a failed shard on."""
    held = Allocation.objects.filter(job=job, held_to__isnull=True).exclude(gpu=gpu)
    return held.filter(gpu__in=Gpu.objects.online()).exists()


def _running(job_id: int):
    """The job while it runs, as a subquery: a join (`job__state=`) would make Django's UPDATE match
    `id IN (SELECT ... JOIN ...)`, which PostgreSQL does not recheck after a concurrent update, so two
    slots could both win the same claim. Conditions on the shard's own row are rechecked."""
    return Job.objects.filter(pk=job_id, state=State.RUNNING).values("pk")


def _held_by(job_id: int, gpu: Gpu):
    """The job while this slot holds it, as a subquery: a slot whose hold ended (its node was taken
    offline and came back) claims nothing more."""
    return Allocation.objects.filter(job_id=job_id, gpu=gpu, held_to__isnull=True).values("job_id")


def _keep_claim(shard: Shard, token: str, records_done: int | None = None) -> None:
    """Renew the claim's lease; ShardLost if it ended. The records its batches have done so far, when given,
    go in the same UPDATE: progress within a shard costs no write of its own."""
    renewal: dict = {"lease_until": timezone.now() + timedelta(seconds=settings.E31_SHARD_LEASE_SECONDS)}
    if records_done is not None:
        # The keeper's thread and the work both renew: the later write of an older count takes nothing back.
        renewal["records_done"] = Greatest("records_done", Value(records_done))
    renewed = Shard.objects.filter(
        pk=shard.pk, claim=token, status=Shard.Status.RUNNING, job_id__in=_running(shard.job_id)
    ).update(**renewal)
    if not renewed:
        raise ShardLost


def _reject_rows(rejects: list[tuple[Record, str]], raw: Callable[[Record], str]) -> dict[str, list]:
    rejects.sort(key=lambda item: item[0].position)
    return {
        "record": [record.position for record, _ in rejects],
        "line": [record.line for record, _ in rejects],
        "reason": [reason for _, reason in rejects],
        "raw": [raw(record) for record, _ in rejects],
    }


class LeaseKeeper:
    """Renews a claimed shard's lease from a thread of its own while the shard is worked on, so a step
    longer than a lease (a partner's large model loading in the first batch, a long generation, a big
    shard read from S3) keeps the claim, and the hold, which its live lease shows the node is served.
    The work's own checks after each batch still stop a shard within a second of a cancel; the
    keeper stops at the end, or once the claim is lost (the work's next check finds that too), or once
    a step has run E31_BATCH_MAX_SECONDS without the work saying it moved on: a process stuck in a
    batch is not working, and its lease lapses as a dead one's would, so that the shard is taken again
    and the hold is not counted as served. With `hold` (the allocation and the runner token of the task
    that works the shard), each renewal says the task still serves the hold too, as the task does between
    shards: a hold is not taken for lost while its shard runs longer than a node's timeout."""

    def __init__(self, shard: Shard, token: str, hold: tuple[int, str] | None = None):
        self.shard, self.token, self.hold = shard, token, hold
        self.stopping = threading.Event()
        self.moved_at = time.monotonic()
        self.records_done = 0
        self.thread = threading.Thread(target=self._keep, name=f"lease-of-shard-{shard.pk}", daemon=True)

    def moved_on(self, records_done: int | None = None) -> None:
        """The work finished a step (read the shard, ran a batch): it is not stuck. After a batch, it says
        how many records its batches have done, which the keeper's renewals write too."""
        self.moved_at = time.monotonic()
        if records_done is not None:
            self.records_done = records_done

    def __enter__(self) -> "LeaseKeeper":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join()

    def _keep(self) -> None:
        try:
            while not self.stopping.wait(settings.E31_SHARD_LEASE_SECONDS / 4):
                if (stuck := time.monotonic() - self.moved_at) > settings.E31_BATCH_MAX_SECONDS:
                    log.warning("shard %s: a step ran %.0f s: stuck, its lease lapses", self.shard.pk, stuck)
                    return
                try:
                    _keep_claim(self.shard, self.token, self.records_done)
                    if self.hold:
                        _report(*self.hold)
                except ShardLost:
                    return
                except DatabaseError as error:  # the database away a moment: the lease has time left to try again
                    log.warning("shard %s: its lease was not renewed: %s", self.shard.pk, error)
        finally:
            connection.close()  # this thread's own connection


def process_shard(job: Job, shard: Shard, token: str, gpu: Gpu, hold: tuple[int, str] | None = None) -> None:
    """Work a claimed shard into its part and rejects under its claim token; ShardLost if the claim ends.
    `hold`: the allocation and runner token of the task that works it, reported on while it does."""
    with LeaseKeeper(shard, token, hold) as keeper:
        _work(job, shard, token, gpu, keeper)


def _work(job: Job, shard: Shard, token: str, gpu: Gpu, keeper: LeaseKeeper) -> None:
    processor = processors.get(job.work)
    context = context_for(job, device="cuda" if gpu.kind == Gpu.Kind.GPU else "cpu", slot=gpu.index)
    records, raw = read_shard(job, shard)
    keeper.moved_on()
    _keep_claim(shard, token)
    checked = time.monotonic()
    schema = output_schema(job)
    rejects: list[tuple[Record, str]] = []
    kept_total = processed = 0
    with tempfile.TemporaryDirectory(prefix="e31-shard-", dir=settings.FILE_UPLOAD_TEMP_DIR) as scratch:
        part = os.path.join(scratch, "part.parquet")
        with pq.ParquetWriter(part, schema) as writer:
            for batch in batched(records, processor.records_per_batch(context.device)):
                result = processor.run_batch(batch, context)
                processed += len(batch)
                keeper.moved_on(processed)
                # A reducing processor's table is a partial summary: its rows are not the kept records.
                if processor.reduces:
                    writer.write_table(result.table)
                else:
                    kept = pa.array(result.kept, pa.int64())  # typed: no kept record leaves no type to infer
                    writer.write_table(result.table.add_column(0, schema.field(RECORD_COLUMN), kept))
                rejects += result.rejects
                kept_total += len(result.kept)
                if job.time_limit_passed():
                    lifecycle.time_out(job)
                    _keep_claim(shard, token)  # the job no longer runs: this stops the shard
                if time.monotonic() - checked >= CLAIM_CHECK_SECONDS:
                    _keep_claim(shard, token, records_done=processed)
                    checked = time.monotonic()
        rejects_part = os.path.join(scratch, "rejects.parquet")
        pq.write_table(pa.table(_reject_rows(rejects, raw), schema=REJECT_SCHEMA), rejects_part)
        _keep_claim(shard, token, records_done=processed)
        base = f"{job.storage_prefix}/shards/{shard.index:05d}-{token}"
        with open(part, "rb") as handle:
            output_path = default_storage.save(f"{base}.parquet", ScratchFile(handle))
        with open(rejects_part, "rb") as handle:
            rejects_path = default_storage.save(f"{base}.rejects.parquet", ScratchFile(handle))
    done = Shard.objects.filter(pk=shard.pk, claim=token, status=Shard.Status.RUNNING).update(
        status=Shard.Status.DONE,
        output_path=output_path,
        rejects_path=rejects_path,
        records_out=kept_total,
        records_rejected=len(rejects),
        records_done=processed,
        peak_memory_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,  # Linux counts KiB
        finished_at=timezone.now(),
        lease_until=None,
        error="",
    )
    if not done:
        default_storage.delete(output_path)
        default_storage.delete(rejects_path)
        raise ShardLost
