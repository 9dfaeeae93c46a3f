"""A dataset given as several locations, its parts (`Job.source_parts`): staged as one stream over the parts
in the order given, so the staged copy is the parts joined and describing, shards and positions see one
dataset.

Before a byte is handed on, the head of every part is read (a few parts at a time) and judged together: a
part that cannot be had, that is not CSV or JSONL, that is of another format than the first, or whose CSV
header is not the first part's, is refused by name before anything is queued or held. Then the parts are
fetched a few at a time, each on a thread of its own into a bounded queue, and read in order: memory holds
at most PARALLEL × QUEUED_CHUNKS chunks whatever the parts' sizes. A part that fails (a dropped connection
that cannot resume, a 5xx) is fetched again on its own, the bytes already handed on skipped once they are
found the same. Each part may be compressed on its own (gzip, zstd, bzip2: `jobs.staging.compressed`), and
the joined stream is of the uncompressed bytes. It holds each later CSV part without its header, and a
newline after a part that ends without one. Each part's bytes and SHA-256 as sent are recorded on the job
as it ends, and the SHA-256 of all of them in order is the data's (`raw_sha256`).
"""

import codecs
import contextlib
import hashlib
import io
import logging
import os
import queue
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

from django.conf import settings

from jobs.models import Job
from jobs.staging import compressed, fetch, formats, over_dataset_limit, s3
from jobs.staging.progress import StagingProgress
from portal.text import redacted

PARALLEL = 4  # parts fetched at once: the one read and those after it
QUEUED_CHUNKS = 8  # chunks a part may hold ready before its reader takes them
CHUNK = 1024 * 1024
ATTEMPTS = 3  # tries of a part before the job fails naming it
RETRY_AFTER = (0.5, 2.0)  # seconds before the second try, and the third
HEAD_BYTES = formats.SAMPLE_BYTES
WAIT = 0.5  # seconds between a blocked thread's checks that staging still reads
# What another try would not change: the part is missing or refused (a timeout or too many requests may pass),
# its host is not one staging may reach, or it is past the dataset's limit.
FINAL = re.compile(r"answered HTTP 4(?!08|29)\d\d|is not a public address|byte limit")
JOINED_FORMATS = ("csv", "jsonl")
NOT_JOINED = {"parquet": "Parquet", "images": "an archive of images"}

log = logging.getLogger(__name__)

OpenPath = Callable[[str, str], contextlib.AbstractContextManager[BinaryIO]]


class PartError(ValueError):
    """A part that cannot be staged; the message, for the user, names it."""


class _Stopped(Exception):
    """Staging stopped reading the parts (it ended, failed or was cancelled)."""


class _Enough(Exception):
    """A part's head is read: its fetch stops there."""


@dataclass(frozen=True)
class Part:
    """One of a dataset's locations: its place (from 1), as given (a URL with its query) and as shown."""

    number: int
    count: int
    location: str

    @property
    def shown(self) -> str:
        """As pages and errors show it: a URL without its query."""
        return redacted(self.location) if self.location.lower().startswith(("http://", "https://")) else self.location

    def named(self) -> str:
        return f"part {self.number} of {self.count} ({self.shown})"

    @property
    def said(self) -> str:
        """The part named at the start of a sentence."""
        return f"Part {self.number} of {self.count} ({self.shown})"


Heard = Callable[[int | None], None]


def _copier(job: Job, open_path: OpenPath) -> Callable[[Part, BinaryIO, Heard | None], None]:
    """What copies a part of the job's kind into a writable stream, from its first byte; `heard`, if given,
    hears the part's size as sent before any of it is written (None: not announced)."""

    def copy(part: Part, into: BinaryIO, heard: Heard | None = None) -> None:
        heard = heard or (lambda size: None)
        if job.source_kind == Job.Source.URL:
            limit, allowed = settings.E31_MAX_DATASET_BYTES, settings.E31_STAGING_ALLOWED_HOSTS
            fetch.fetch(part.location, into, max_bytes=limit, allowed_hosts=allowed, chunk_size=CHUNK, on_length=heard)
        elif job.source_kind == Job.Source.S3:
            _copy_s3(job, part.location, into, heard)
        else:
            with open_path(part.location, job.organisation.slug) as stream:
                heard(_file_size(stream))
                while chunk := stream.read(CHUNK):
                    into.write(chunk)

    return copy


def _file_size(stream) -> int | None:
    try:
        return os.fstat(stream.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None


def _copy_s3(job: Job, uri: str, into: BinaryIO, heard: Heard) -> None:
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 (boto3: loaded where S3 is read)

    from jobs.staging import s3_reads  # noqa: PLC0415

    credentials = s3.unseal(job.source_secret) if job.source_secret else None
    location = s3.parse(uri)
    try:
        answer = s3_reads.client(credentials).get_object(Bucket=location.bucket, Key=location.key)
        heard(answer.get("ContentLength"))
        body = answer["Body"]
        while chunk := body.read(CHUNK):
            into.write(chunk)
    except (ClientError, BotoCoreError) as error:
        raise s3_reads.explain(error, location) from None


def _failure(part: Part, error: Exception) -> PartError:
    """The sentence for a part that could not be had, naming it."""
    if isinstance(error, ValueError | fetch.FetchError):
        return PartError(f"{part.said} could not be staged: {error}")
    log.error("staging %s failed", part.named(), exc_info=error)
    return PartError(f"{part.said} could not be staged: it failed on our side; the operators can see why.")


def _final(error: Exception) -> bool:
    """Whether another try of the part would fail the same way (FINAL, a refusal of S3's or of ours, a fault of
    ours); a connection dropped, a 5xx or a read of a server path that failed is tried again."""
    if isinstance(error, fetch.FetchError):
        return bool(FINAL.search(str(error)))
    return not isinstance(error, OSError)


def _tried(part: Part, attempt: Callable[[], None], stopped: threading.Event) -> None:
    """Run `attempt` until it succeeds, ATTEMPTS times at most; PartError naming the part when it cannot."""
    for tries in range(1, ATTEMPTS + 1):
        try:
            return attempt()
        except (_Stopped, _Enough, PartError):
            raise
        except Exception as error:
            if tries == ATTEMPTS or _final(error):
                raise _failure(part, error) from None
            log.warning("%s failed (%s); trying it again", part.named(), error)
            if stopped.wait(RETRY_AFTER[tries - 1]):
                raise _Stopped from None
    return None


class _Head:
    """A sink that keeps a part's first HEAD_BYTES + 1 bytes and stops the fetch there."""

    def __init__(self):
        self.data = bytearray()

    def write(self, data) -> int:
        self.data += data
        if len(self.data) > HEAD_BYTES:
            raise _Enough
        return len(data)


@dataclass(frozen=True)
class _Judged:
    """What a part's head shows: its format, and for CSV the header line as it is in the part."""

    format: str
    header: bytes = b""


def _head(part: Part, copy, stopped: threading.Event) -> tuple[bytes, bool, int | None]:
    """The part's first HEAD_BYTES + 1 bytes, uncompressed, whether they are all of it, and its size as sent
    (None: not announced)."""
    size: list[int | None] = [None]

    def attempt() -> None:
        sink.data.clear()
        with contextlib.suppress(_Enough):
            copy(part, sink, lambda said: size.__setitem__(0, said))

    sink = _Head()
    _tried(part, attempt, stopped)
    whole = len(sink.data) <= HEAD_BYTES
    plain = compressed.open_decompressed(_Bytes(bytes(sink.data)), part.said)
    head = bytearray()
    try:
        while len(head) <= HEAD_BYTES and (piece := plain.read1(HEAD_BYTES + 1 - len(head))):
            head += piece
    except compressed.CompressedError as error:
        if whole:  # the part itself is broken, not only its head cut short here
            raise PartError(str(error)) from None
        whole = False
    return bytes(head), whole and len(head) <= HEAD_BYTES, size[0]


class _Bytes:
    """A part's head read as a file, for the decompressor to sniff and decode."""

    def __init__(self, data: bytes):
        self.data = memoryview(data)

    def read(self, size: int = -1) -> bytes:
        taken = self.data if size < 0 else self.data[:size]
        self.data = self.data[len(taken) :]
        return bytes(taken)


def _judged(part: Part, head: bytes, whole: bool) -> _Judged:
    """The part's format and header from its head (`whole`: all of it); PartError naming it when it cannot be
    joined."""
    try:
        layout = formats.detect(head[:HEAD_BYTES], at_eof=whole, name=part.shown)
    except formats.FormatError as error:
        raise PartError(f"{part.said}: {error}") from None
    if layout["format"] not in JOINED_FORMATS:
        raise PartError(
            f"{part.said} is {NOT_JOINED[layout['format']]}: parts are joined only as CSV or JSONL; give such a "
            "dataset as one file (or Parquet parts under one S3 prefix)."
        )
    if layout["format"] == "jsonl":
        return _Judged("jsonl")
    line, newline, _ = head.partition(b"\n")
    if not newline:
        raise PartError(f"{part.said} has a header longer than {HEAD_BYTES:,} bytes.")
    return _Judged("csv", line + newline)


def _header_text(header: bytes) -> str:
    return header.removeprefix(codecs.BOM_UTF8).rstrip(b"\r\n").decode("utf-8", "replace")


def judge(parts: list[Part], heads: list[tuple[bytes, bool, int | None]]) -> list[_Judged]:
    """Each part's format and header, refused by name (the first part wrong, in order) when the parts do not
    join into one dataset: of different formats, or CSV parts with different headers."""
    judged = [_judged(part, head, whole) for part, (head, whole, _) in zip(parts, heads, strict=True)]
    first = judged[0]
    for part, this in zip(parts[1:], judged[1:], strict=True):
        if this.format != first.format:
            raise PartError(
                f"{part.said} is {this.format.upper()} and part 1 is {first.format.upper()}: "
                "the parts of one dataset are of one format."
            )
        if _header_text(this.header) != _header_text(first.header):
            raise PartError(
                f"{part.said} has the CSV header {_header_text(this.header)!r}, not part 1's "
                f"{_header_text(first.header)!r}: the parts of one dataset share one header."
            )
    return judged


class _Feed(threading.Thread):
    """One part fetched on a thread of its own into a bounded queue of chunks, tried again on its own when it
    fails: a try after the first skips the bytes already handed on, once they are found the same."""

    def __init__(self, part: Part, copy: Callable[[Part, BinaryIO], None], stopped: threading.Event):
        super().__init__(name=f"e31-part-{part.number}", daemon=True)
        self.part, self.copy, self.stopped = part, copy, stopped
        self.chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUED_CHUNKS)
        self.sha256 = hashlib.sha256()  # of the bytes handed on
        self.bytes = 0
        self.error: PartError | None = None
        self.seen = 0  # bytes of this try so far
        self.again = None  # on a try again: a SHA-256 of the bytes handed on before, as they come, and theirs

    def write(self, data) -> int:
        count = len(data)
        if self.again is not None and self.seen < self.bytes:
            view = memoryview(data)
            skipped, data = view[: self.bytes - self.seen], view[self.bytes - self.seen :]
            self.seen += len(skipped)
            self._check_again(skipped)
        self.seen += len(data)
        if data:
            chunk = data if isinstance(data, bytes) else bytes(data)  # a buffer the fetch fills again is copied
            self.sha256.update(chunk)
            self.bytes += len(chunk)
            self._put(chunk)
        return count

    def _check_again(self, skipped: memoryview) -> None:
        replayed, digest = self.again
        replayed.update(skipped)
        if self.seen == self.bytes and replayed.hexdigest() != digest:
            raise PartError(f"{self.part.said} changed while it was staged; stage it again.")

    def _put(self, chunk: bytes | None) -> None:
        while not self.stopped.is_set():
            try:
                return self.chunks.put(chunk, timeout=WAIT)
            except queue.Full:
                continue
        raise _Stopped

    def _attempt(self) -> None:
        if self.bytes:
            self.again = (hashlib.sha256(), self.sha256.hexdigest())
        self.seen = 0
        self.copy(self.part, self)
        if self.seen < self.bytes:
            raise PartError(f"{self.part.said} came shorter the second time; stage it again.")

    def run(self) -> None:
        try:
            _tried(self.part, self._attempt, self.stopped)
        except _Stopped:
            return
        except PartError as error:
            self.error = error
        with contextlib.suppress(_Stopped):
            self._put(None)


class _Digest(threading.Thread):
    """The SHA-256 of all the parts' bytes as sent, in order, taken on a thread of its own, off the path of
    the reading thread (which the staged copy's own checksum and the decompression load already). The chunks
    it is handed are bytes, never written again."""

    def __init__(self):
        super().__init__(name="e31-parts-digest", daemon=True)
        self.chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUED_CHUNKS)
        self.sha256 = hashlib.sha256()
        self.closed = False
        self.start()

    def update(self, chunk: bytes) -> None:
        self.chunks.put(chunk)

    def run(self) -> None:
        while (chunk := self.chunks.get()) is not None:
            self.sha256.update(chunk)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.chunks.put(None)

    def hexdigest(self) -> str:
        self.close()
        self.join()
        return self.sha256.hexdigest()


class _PartStream:
    """A part's raw bytes as its feed hands them over, read as a file reads; each chunk is added to the
    digest of all the parts as it is taken from the feed."""

    def __init__(self, feed: _Feed, stopped: threading.Event, digest: _Digest, counted: Callable[[int], None]):
        self.feed, self.stopped, self.digest, self.counted = feed, stopped, digest, counted
        self.rest = memoryview(b"")
        self.ended = False

    def peek(self, size: int) -> bytes:
        """The next `size` bytes (fewer only at the end), left to be read."""
        while len(self.rest) < size and not self.ended:
            chunk = self._next()
            self.ended = chunk is None
            self.rest = memoryview(bytes(self.rest) + (chunk or b""))
        return bytes(self.rest[:size])

    def read(self, size: int = -1) -> bytes:
        if not self.rest and not self.ended:
            chunk = self._next()
            self.ended = chunk is None
            self.rest = memoryview(chunk or b"")
        taken = self.rest if size is None or size < 0 else self.rest[:size]
        self.rest = self.rest[len(taken) :]
        self.counted(len(taken))
        return taken.obj if len(taken) == len(taken.obj) else bytes(taken)  # a whole chunk is not copied

    read1 = read

    def _next(self) -> bytes | None:
        while True:
            try:
                chunk = self.feed.chunks.get(timeout=WAIT)
            except queue.Empty:
                if self.stopped.is_set():
                    raise _Stopped from None
                continue
            if chunk is None and self.feed.error:
                raise self.feed.error
            if chunk is not None:
                self.digest.update(chunk)
            return chunk


class Joined:
    """The parts as one binary stream, in order: read, read1 and readinto as staging's copy reads a source."""

    phase = "downloading"
    size = None  # the parts joined: known only once every part is in

    def __init__(self, job: Job, parts: list[Part], judged: list[_Judged], copy, stopped, digest: _Digest, sizes=None):
        self.job, self.parts, self.judged, self.copy, self.stopped = job, parts, judged, copy, stopped
        self.digest = digest
        sizes = sizes or [None]
        # The parts' bytes as sent, where each said how many: staging's progress counts to it (staged_copy).
        self.sent_size = sum(sizes) if None not in sizes else None
        self.raw_bytes = 0  # the parts' bytes as sent, read so far
        self.feeds: list[_Feed | None] = []
        self.index = -1  # the part being read
        self.current: BinaryIO | None = None
        self.joined = 0
        self.last = b"\n"
        self.records = [{"location": part.location} for part in parts]
        self._next_part()

    def _next_part(self) -> bool:
        """Move to the next part, starting the fetch of those after it; False after the last."""
        self.index += 1
        while len(self.feeds) < min(self.index + PARALLEL, len(self.parts)):
            feed = _Feed(self.parts[len(self.feeds)], self.copy, self.stopped)
            feed.start()
            self.feeds.append(feed)
        if self.index == len(self.parts):
            self.current = None
            return False
        raw = _PartStream(self.feeds[self.index], self.stopped, self.digest, self._sent)
        plain = compressed.sniff(raw.peek(compressed.SNIFF_BYTES)) is None  # read as it is: no second checksum
        self.current = raw if plain else compressed.open_decompressed(raw, self.parts[self.index].said)
        self.records[self.index]["compression"] = None if plain else self.current.compression
        if self.index:
            self._drop_header()
        return True

    def _sent(self, count: int) -> None:
        self.raw_bytes += count

    def _drop_header(self) -> None:
        """A later CSV part's header, found the same as part 1's when the heads were judged, is not joined."""
        header = self.judged[self.index].header
        got = b""
        while len(got) < len(header) and (more := self.current.read(len(header) - len(got))):
            got += more
        if got != header:
            part = self.parts[self.index]
            raise PartError(f"{part.said} changed while it was staged (its header); stage it again.")

    def _ended_part(self) -> None:
        """Record the part just read: its bytes and SHA-256 as sent, with its compression."""
        feed = self.feeds[self.index]
        self.records[self.index].update(bytes=feed.bytes, sha256=feed.sha256.hexdigest())
        Job.objects.filter(pk=self.job.pk).update(source_parts=self.records)
        self.feeds[self.index] = None  # its memory goes: only its figures are kept

    def _take(self, size: int) -> bytes:
        """Up to `size` bytes (-1: a chunk's worth) of the parts joined; empty after the last."""
        while self.current is not None:
            for feed in self.feeds[self.index + 1 :]:
                if feed.error:  # a part after this one failed: said now, not once it is reached
                    raise feed.error
            data = self.current.read(CHUNK if size < 0 else size)
            if data:
                self.last = data[-1:]
                self._count(len(data))
                return data
            if self.last != b"\n":  # the next part's first record begins on a line of its own
                self.last = b"\n"
                self._count(1)
                return b"\n"
            self._ended_part()
            self._next_part()
        return b""

    def _count(self, size: int) -> None:
        self.joined += size
        if self.joined > settings.E31_MAX_DATASET_BYTES:
            part = self.parts[self.index]
            raise PartError(over_dataset_limit(f"The dataset up to {part.named()}", self.joined))

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self._take(-1), b""))
        chunks, wanted = [], 0
        while wanted < size and (chunk := self._take(size - wanted)):
            chunks.append(chunk)
            wanted += len(chunk)
        return b"".join(chunks)

    def read1(self, size: int = -1) -> bytes:
        return self._take(size)

    def readinto(self, buffer) -> int:
        data = self._take(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def raw_sha256(self) -> str:
        """The SHA-256 of every part's bytes as sent, in order: the data's, as the partner can check it (the
        staged copy takes it in place of its own, as it does a compressed source's)."""
        return self.digest.hexdigest()


def parts_of(job: Job) -> list[Part]:
    return [Part(number, len(job.source_parts), item["location"]) for number, item in enumerate(job.source_parts, 1)]


@contextlib.contextmanager
def joined(job: Job, progress: StagingProgress, open_path: OpenPath) -> Iterator[Joined]:
    """The job's parts as one stream, once their heads show that they join into one dataset; their fetches
    stopped when it closes (each thread ends at its next write: none touches the database)."""
    parts, copy, stopped = parts_of(job), _copier(job, open_path), threading.Event()
    digest = None
    try:
        heads = []
        with ThreadPoolExecutor(PARALLEL * 2, thread_name_prefix="e31-part-head") as pool:
            for head in pool.map(lambda part: _head(part, copy, stopped), parts):
                heads.append(head)
                progress.advance(0)  # keeps the lease while many heads are read; StagingStopped once cancelled
        judged = judge(parts, heads)
        digest = _Digest()
        yield Joined(job, parts, judged, copy, stopped, digest, [size for *_, size in heads])
    finally:
        stopped.set()
        if digest is not None:
            digest.close()


def forget(job: Job) -> None:
    """Once staging no longer needs them: the parts' URLs kept without their query (a signature)."""
    if job.source_kind != Job.Source.URL or not job.source_parts:
        return
    recorded = Job.objects.filter(pk=job.pk).values_list("source_parts", flat=True).first() or []
    wiped = [{**part, "location": redacted(part["location"])} for part in recorded]
    if wiped != recorded:
        Job.objects.filter(pk=job.pk).update(source_parts=wiped)
