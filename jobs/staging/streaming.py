"""Staging that streams into the pass: the staged copy is read behind its writer as it grows, cut into
shards at record boundaries, and each shard recorded once its bytes are in the copy, so the job can run
on the first shards while the rest of its data arrives.

A `Follower` (a thread of the staging attempt) reads the copy's records as the copy is written, the same
way describing a whole copy does (`iter_records`), and hands its cut points to a `ShardCutter`, which
turns them into shards sized from the first cut, smaller at the start and at the end (every size a function
of the data's bytes, so an attempt that takes the staging over cuts the same shards again). The `Stream`
records them as they are cut, from the follower's thread, so a source that pauses leaves no shard
unrecorded: the first queues the job, with `streaming` set, and each later one becomes claimable as it is
committed, and asks for a scheduling pass when the job runs on fewer slots than it asked for (one gave its
hold back while bytes were awaited). While the job streams,
`stream_ready` says whether the shards staged would keep its slots busy until staging ends (`pacing`):
the scheduler starts only such a job. When the copy ends, the last shards (smaller, as at any job's
end), the data's size, SHA-256 and record count are recorded in one transaction with `streaming` cleared.

CSV and JSONL stream; Parquet and archives (their layout is known only from the whole file), work kinds
that scan every record before the pass (their plan needs all of them), samples, and job storage on S3
(the copy is one object, whole only at its end) stage every byte first, as before; so does a staging called
inside a transaction (a command's or a test's), whose rows the follower's own connection could not reach.
"""

import io
import math
import os
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.core.files.storage import FileSystemStorage, default_storage
from django.db import connection, transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from jobs import enqueue, lifecycle, processors
from jobs.models import STAGING, Allocation, Job, Shard, State
from jobs.processors import ParamError
from jobs.scheduling import pacing
from jobs.staging import fastcsv, shards
from jobs.staging.formats import SAMPLE_BYTES, FormatError, detect, iter_records, read_header
from jobs.staging.progress import StagingStopped
from jobs.staging.shards import Cut

POLL_SECONDS = 0.02  # how often a reader caught up with the copy looks for more of it
PACE_SECONDS = 0.5  # how often a streaming job's pace is worked out again
STREAMED = ("csv", "jsonl")
STREAMED_SHARDS_PER_SHARD = 2  # a streamed dataset's shards for one of a dataset staged whole
SIZING = ("shard_records", "expected_records", "expected_bytes")  # fixed at the first cut, kept in the layout


def streams(job: Job) -> bool:
    """Whether this job's staging may stream into its pass (see the module's docstring)."""
    if not settings.E31_STREAM_STAGING or job.kind == Job.Kind.SAMPLE or job.sample_id:
        return False
    if not isinstance(default_storage, FileSystemStorage):
        return False
    if connection.in_atomic_block:
        return False  # the follower's thread has a connection of its own: it could neither see nor lock this one's rows
    return processors.get(job.work).scanner(job.params) is None


class _Growing(io.RawIOBase):
    """The staged copy read while it is written: a read waits for the bytes it asks for, a line for its
    end, until the copy is `complete`. Bytes below the file's size are written: one writer, in order."""

    def __init__(self, path: str, complete: threading.Event, stopped: threading.Event, idle: Callable[[], None]):
        self.file = open(path, "rb")  # noqa: SIM115 (closed with the stream)
        self.complete, self.stopped, self.idle = complete, stopped, idle

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.file.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.file.seek(offset, whence)

    def _wait(self, end: int) -> bool:
        """Wait until the copy holds `end` bytes; False when it is complete with fewer."""
        while os.fstat(self.file.fileno()).st_size < end:
            if self.complete.is_set():
                return os.fstat(self.file.fileno()).st_size >= end
            if self.stopped.wait(POLL_SECONDS):
                raise StagingStopped
            self.idle()
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            while not self.complete.is_set():
                if self.stopped.wait(POLL_SECONDS):
                    raise StagingStopped
            return self.file.read()
        self._wait(self.file.tell() + size)
        return self.file.read(size)

    def readinto(self, buffer) -> int:
        """What the copy holds past the position, up to len(buffer), once it holds a byte more; 0 at its end.
        Not filled whole: a source that pauses leaves no block of the scan waiting for the bytes after it."""
        self._wait(self.file.tell() + 1)
        return self.file.readinto(buffer)

    def readline(self, size: int = -1) -> bytes:
        start = self.file.tell()
        while True:
            line = self.file.readline()
            if line.endswith(b"\n") or (self.complete.is_set() and not self._more(start + len(line))):
                return line
            self.file.seek(start)
            self._wait(start + len(line) + 1)

    def _more(self, end: int) -> bool:
        return os.fstat(self.file.fileno()).st_size > end

    def close(self) -> None:
        self.file.close()
        super().close()


class ShardCutter:
    """Cut points into shards, as they come: a shard ends at the first cut that makes it `target`
    records, or past E31_SHARD_BYTES. The first shards are smaller (`ramped`), so the pass can start on
    the first bytes to arrive rather than wait for a full shard a slot. As the records expected in all run
    out, smaller ones again (shards.tapered), so the last bytes to arrive are the start of small shards,
    not of one that runs long after them: the records expected are worked out again at each cut from the
    staged bytes `expected_bytes` at the records a byte so far (else the first cut's `expected`). What is
    left at the end is cut as any dataset's last shards are (shards.from_cuts). Every size is a function
    of the data's bytes and the job, so an attempt that takes the staging over cuts the same shards."""

    def __init__(
        self, job: Job, start: Cut, target: int, expected: int | None, expected_bytes: int | None = None, ramp=True
    ):
        self.job, self.begin, self.target, self.expected = job, start, target, expected
        self.expected_bytes, self.ramp = expected_bytes, ramp
        self.index = 0
        self.pending: list[Cut] = []

    def _expected(self, cut: Cut) -> int | None:
        if self.expected_bytes and cut.end_byte > 0 and cut.records:
            return max(cut.records, math.ceil(self.expected_bytes * cut.records / cut.end_byte))
        return self.expected

    def add(self, cut: Cut) -> list[dict]:
        self.pending.append(cut)
        size, span = cut.records - self.begin.records, cut.end_byte - self.begin.end_byte
        grain = shards.grain(self.job)
        target = ramped(self.target, self.index, self.job.gpus, grain) if self.ramp else self.target
        if (expected := self._expected(cut)) is not None:
            left = max(0, expected - self.begin.records)
            target = min(target, shards.tapered(self.job, self.target, left, grain))
        if size < target and span < settings.E31_SHARD_BYTES:
            return []
        shard = {
            "index": self.index,
            "first_record": self.begin.records + 1,
            "record_count": size,
            "first_line": self.begin.end_line + 1,
            "start_byte": self.begin.end_byte,
            "end_byte": cut.end_byte,
        }
        self.index, self.begin, self.pending = self.index + 1, cut, []
        return [shard]

    @property
    def last(self) -> Cut:
        """The last cut point handed in."""
        return self.pending[-1] if self.pending else self.begin

    def end(self) -> list[dict]:
        if not self.pending:
            return []
        left = self.pending[-1].records - self.begin.records
        tail = shards.from_cuts(self.job, self.begin, self.pending, left)
        for offset, shard in enumerate(tail):
            shard["index"] = self.index + offset
        return tail


RAMP_STEPS = 3  # the first shards: an eighth of the target a GPU, then a quarter, then half


def ramped(target: int, index: int, gpus: int, smallest: int) -> int:
    """Records for shard `index` at the start of a streamed dataset: a shard a GPU at each step of the ramp,
    each step twice the last, up to the target (never under `smallest`, the job's grain)."""
    step = index // max(1, gpus)
    if step >= RAMP_STEPS:
        return target
    return max(smallest, target >> (RAMP_STEPS - step))


def expected_records(size: int | None, read: int, written: int, head_bytes: int, head_records: int) -> int | None:
    """The records the data is expected to hold, at the first cut: its `size` as sent (None: not announced),
    expanded as the bytes `read` of it so far were into the bytes `written` to the copy (a compressed
    source's grow), at the records per staged byte of its first records."""
    if not size or not head_records or not read or not written:
        return None
    staged = size * written / read
    return max(head_records, math.ceil(staged * head_records / max(1, head_bytes)))


def shard_target(job: Job, expected: int | None) -> int:
    """Records per shard, fixed at the first cut: about eight shards per GPU of the records expected (twice
    as many as a dataset staged whole is cut into, so the pass can start on a smaller part of it); else
    E31_SHARD_RECORDS."""
    if expected:
        return shards.shard_target(job, math.ceil(expected / STREAMED_SHARDS_PER_SHARD), shards.grain(job))
    return shards.shard_target(job, settings.E31_SHARD_RECORDS * 4 * job.gpus, shards.grain(job))


class Follower(threading.Thread):
    """Reads the copy at `path` behind its writer: its layout from the first bytes, then its records,
    cutting them into shards that `on_shards` is handed as each is whole in the copy, sized at the first
    cut from the `source`'s size and bytes read (or by `sizing`, the job's from an attempt before).
    `declined` when the data does not stream (a format read only whole); `error` what stopped it, for the
    staging to raise."""

    def __init__(
        self,
        job: Job,
        path: str,
        source: tuple[Callable[[], int | None], Callable[[], int]],
        on_shards: Callable[[list[dict], dict], None],
        pace: Callable[[], None],
        sizing: dict | None = None,
    ):
        super().__init__(name="e31-stream-cuts", daemon=True)
        self.job, self.path, self.on_shards, self.pace = job, path, on_shards, pace
        self.size, self.read = source  # the source's size as announced, and its bytes read so far
        self.sizing = sizing or {}
        self.paced = 0.0
        self.complete, self.stopped = threading.Event(), threading.Event()
        self.layout: dict | None = None
        self.declined = False
        self.error: BaseException | None = None
        self.records = 0
        self.emitted = 0
        self.cutter: ShardCutter | None = None

    def run(self) -> None:
        try:
            path = default_storage.path(self.path)
            while not os.path.exists(path):  # the copy names its file once its source answers
                if self.complete.is_set() or self.stopped.wait(POLL_SECONDS):
                    self.declined = True
                    return
            with _Growing(path, self.complete, self.stopped, self._pace) as stream:
                self._follow(stream)
        except BaseException as error:
            self.error = error
        finally:
            connection.close()  # this thread's own

    def _follow(self, stream: _Growing) -> None:
        head = stream.read(SAMPLE_BYTES + 1)
        layout = detect(head[:SAMPLE_BYTES], at_eof=len(head) <= SAMPLE_BYTES, name=self.job.source_name)
        if layout["format"] not in STREAMED:
            self.declined = True
            return
        stream.seek(0)
        data_offset, header_lines = 0, 0
        if layout["format"] == "csv":
            layout["columns"], data_offset, header_lines = read_header(stream, layout)
        layout["data_offset"] = data_offset
        self.layout = layout
        start = Cut(0, data_offset, header_lines)
        if layout["format"] == "csv":
            try:
                return self._scan(stream, start)
            except fastcsv.Unsure:
                pass  # the exact read goes on from the last cut the scan vouched for
        self._read(stream, start, self.cutter.last if self.cutter else start)

    def _scan(self, stream: _Growing, start: Cut) -> None:
        """A CSV's records counted by the fast scan (fastcsv), its cut points handed on block by block; Unsure
        where it cannot vouch for a block (the cut points before it stand)."""
        if len(self.layout["columns"]) < 2:
            raise fastcsv.Unsure
        scan = _FollowingScan(self.layout["delimiter"], start.end_byte, start.end_line, shards.grain(self.job))
        scan.handed = lambda cuts: [self._cut(start, Cut(*cut), {}) for cut in cuts]
        scan.run(stream, lambda done: None)
        self.records = scan.records
        if self.records and (self.cutter is None or self.cutter.last.records != self.records):
            self._cut(start, Cut(scan.records, scan.position, scan.lines), {}, emit=False)

    def _read(self, stream: _Growing, start: Cut, since_cut: Cut) -> None:
        """The records read one by one, from the cut `since_cut` on (the header's end, or where the scan left)."""
        layout = self.layout
        stream.seek(since_cut.end_byte)
        self.records = since_cut.records
        columns: dict[str, None] = dict.fromkeys(layout.get("columns", []))
        grain, since = shards.grain(self.job), 0
        last = since_cut
        records = iter_records(
            stream, layout, start=since_cut.end_byte, first_position=self.records + 1, first_line=since_cut.end_line + 1
        )
        for record in records:
            self.records += 1
            since += 1
            if record.error is None and type(record.value) is dict:
                columns.update(dict.fromkeys(record.value))
            last = Cut(self.records, record.end, record.end_line)
            previous = self.cutter.last if self.cutter else start
            if since >= grain or record.end - previous.end_byte >= settings.E31_SHARD_BYTES // 4:
                since = 0
                self._cut(start, last, columns)
        if self.records and (self.cutter is None or self.cutter.last != last):
            self._cut(start, last, columns, emit=False)  # the last record always ends a shard
        layout["columns"] = list(columns)

    def _cut(self, start: Cut, cut: Cut, columns: dict, emit: bool = True) -> None:
        if self.cutter is None:
            # Fixed once, and kept with the job: an attempt that takes the staging over cuts the same shards.
            if "shard_records" not in self.sizing:
                read, written = self.read(), os.path.getsize(default_storage.path(self.path))
                expected = expected_records(self.size(), read, written, cut.end_byte, cut.records)
                self.sizing = {
                    "shard_records": shard_target(self.job, expected),
                    "expected_records": expected,
                    "expected_bytes": math.ceil(self.size() * written / read) if self.size() and read else None,
                }
            sizing = self.sizing
            # A staging begun before shards ramped up (its layout has no expected_bytes) is cut as it was begun.
            self.cutter = ShardCutter(
                self.job,
                start,
                sizing["shard_records"],
                sizing["expected_records"],
                sizing.get("expected_bytes"),
                ramp="expected_bytes" in sizing,
            )
            self.layout.update(self.sizing)
        if not emit:
            self.cutter.pending.append(cut)
            return
        if made := self.cutter.add(cut):
            if columns:
                self.layout["columns"] = list(columns)
            self.emitted += len(made)
            self.on_shards(made, self.layout)
            self._pace()

    def _pace(self) -> None:
        if time.monotonic() - self.paced >= PACE_SECONDS:
            self.paced = time.monotonic()
            self.pace()

    def rest(self) -> list[dict]:
        """The last shards, once the copy is complete and every record read."""
        return self.cutter.end() if self.cutter else []

    def final_layout(self, queued: dict) -> dict:
        """The layout recorded at the end: a JSONL's columns stay those the pass started with (the first
        shards' keys), since the parts already written have them; a later key is in no output column."""
        return {**self.layout, "columns": queued.get("columns", self.layout["columns"])}


class _FollowingScan(fastcsv._Scan):
    """The fast scan over a growing copy, handing its cut points every grain records on (`handed`) as each
    block is counted, before the next is read: a block it cannot vouch for raises Unsure before any of its
    cut points."""

    handed: Callable[[list[tuple[int, int, int]]], None]

    def __init__(self, delimiter: str, data_offset: int, header_lines: int, grain: int):
        super().__init__(delimiter, data_offset, header_lines, grain, max_cuts=math.inf)
        self.passed = 0  # the cut points looked at so far
        self.handed_records = 0  # the records up to the last cut point handed on

    def _block(self, data: bytearray, filled: int, last: bool) -> int:
        taken = super()._block(data, filled, last)
        fresh = []
        for cut in self.cuts[self.passed :]:
            # Every grain records: where a block ends depends on how fast the copy grew, and an attempt that
            # takes the staging over must cut the same shards.
            if cut[0] > self.handed_records and not cut[0] % self.grain:
                fresh.append(cut)
                self.handed_records = cut[0]
        del self.cuts[:-1]  # handed on: the scan compares only the last with the next (memory stays flat)
        self.passed = len(self.cuts)
        if fresh:
            self.handed(fresh)
        return taken


class Stream:
    """One staging attempt's shards recorded as the follower cuts them (see the module's docstring). Taking
    over a streaming staging, it cuts the data again: each shard recorded before must come out the same, and
    the copy this attempt writes becomes the job's staged copy with the first shard it adds."""

    def __init__(self, job: Job, claim: str, path: str):
        self.job, self.claim, self.path = job, claim, path
        self.earlier = list(
            Shard.objects.filter(job=job)
            .order_by("index")
            .values_list("index", "first_record", "record_count", "start_byte", "end_byte")
        )
        self.queued = bool(self.earlier)
        self.layout = dict(job.layout) if self.earlier else {}  # as the pass reads the data: fixed when queued
        self.deferred = False  # queued only once every byte is staged (a JSONL key the plan needs not seen yet)
        self.ready = False
        self.regrown = 0.0

    def owned(self):
        """The job while this attempt stages it, streaming or not yet."""
        return Job.objects.filter(STAGING, pk=self.job.pk, staging_claim=self.claim)

    def add(self, made: list[dict], layout: dict) -> None:
        """Record shards whole in the copy: the first queues the job (the plan made from the layout so far)."""
        if self.deferred:
            return
        fresh = [shard for shard in made if shard["index"] >= len(self.earlier)]
        for shard in made:
            if shard["index"] < len(self.earlier) and _key(shard) != self.earlier[shard["index"]]:
                raise FormatError(
                    f"the data differs from what was staged before at byte {shard['start_byte']:,}: "
                    "it changed while it was staged."
                )
        if not fresh:
            return
        if not self.queued:
            self._queue(fresh, dict(layout))
            return
        with transaction.atomic():
            fields = {"staged_path": self.path} if fresh[0]["index"] == len(self.earlier) and self.earlier else {}
            if not self.owned().update(modified=timezone.now(), **fields):
                raise StagingStopped
            Shard.objects.bulk_create(Shard(job=self.job, **shard) for shard in fresh)
        if fields and self.job.staged_path != self.path:
            default_storage.delete(self.job.staged_path)  # the attempt before's copy: this one holds its bytes
            self.job.staged_path = self.path
        self._regrow()

    def _regrow(self) -> None:
        """A pass, when the job runs on fewer slots than it asked for and a shard waits for one: a slot that
        found nothing staged gave its hold back, and the shards staged since want it again now, not at the
        scheduler's next beat. At most one a PACE_SECONDS."""
        if time.monotonic() - self.regrown < PACE_SECONDS:
            return
        held = Allocation.objects.filter(job=self.job, held_to=None).count()
        if held < self.job.gpus and Job.objects.filter(pk=self.job.pk, state=State.RUNNING).exists():
            self.regrown = time.monotonic()
            enqueue.schedule()

    def _queue(self, made: list[dict], layout: dict) -> None:
        try:
            plan = processors.get(self.job.work).prepare({}, dict(layout), self.job.params, self.job.model_path)
        except ParamError:
            if layout["format"] == "jsonl":
                self.deferred = True  # a key may appear later in the data: decided once it is all read
                return
            raise
        with transaction.atomic():
            fields = dict(staged_path=self.path, input_format=layout["format"], layout=layout, plan=plan)
            if not self.owned().filter(state=State.STAGING).update(streaming=True, stream_ready=False, **fields):
                raise StagingStopped
            Shard.objects.bulk_create(Shard(job=self.job, **shard) for shard in made)
            staged = f"queued while staging goes on: the pass can start on the {len(made)} shard(s) staged"
            if not lifecycle.queue(self.job, timezone.now(), staged):
                raise StagingStopped
        self.queued, self.layout = True, layout
        self.job.staged_path = self.path

    def pace(self, done: int, total: int | None, started: float, staged: int) -> None:
        """Work out the job's `stream_ready` again, from the staging rate and its slots' (see pacing); a job
        that becomes ready is scheduled."""
        if not self.queued:
            return
        elapsed = max(1e-3, time.monotonic() - started)
        expansion = staged / done if done else 1.0  # staged bytes for a byte read (a compressed source's)
        left = None if total is None else max(0, total - done) * expansion
        backlog = Shard.objects.filter(job=self.job, status=Shard.Status.PENDING).aggregate(
            shards=Count("pk"), bytes=Sum(F("end_byte") - F("start_byte"))
        )
        ready = pacing.may_start(
            width=self.job.gpus,
            backlog_shards=backlog["shards"] or 0,
            backlog_bytes=backlog["bytes"] or 0,
            left_bytes=left,
            staging_rate=staged / elapsed,
            slot_rate=pacing.slot_rate(self.job),
        )
        if ready != self.ready and not self.owned().update(stream_ready=ready):
            raise StagingStopped
        if ready and not self.ready:
            enqueue.schedule()
        self.ready = ready


def _key(shard: dict) -> tuple:
    return shard["index"], shard["first_record"], shard["record_count"], shard["start_byte"], shard["end_byte"]
