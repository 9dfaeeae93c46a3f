"""Where a job's data comes from: an upload in storage, an HTTP(S) URL, an S3 object, or a path on a shared
filesystem in the organisation's folder under one of the operator's staging roots. Each is checked
when the job is submitted and opened, checked again, when it is staged."""

import contextlib
import hashlib
import itertools
import logging
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from django.conf import settings
from django.core.files.storage import default_storage

from jobs.models import Job
from jobs.staging import compressed, fetch, over_dataset_limit, parts, s3
from jobs.staging.progress import StagingProgress
from portal.text import hidden_character, redacted

log = logging.getLogger(__name__)


class SourceError(ValueError):
    """The data's location cannot be used; the message is for the user."""


def kind_of(location: str) -> str:
    if location.lower().startswith("s3://"):
        return Job.Source.S3
    return Job.Source.URL if "://" in location else Job.Source.PATH


def name_of(location: str) -> str:
    if kind_of(location) == Job.Source.S3:
        return Path(location.rstrip("/")).name
    if kind_of(location) == Job.Source.URL:
        try:
            parts = urlsplit(location)
        except ValueError:  # not a URL: the fetch refuses it, saying why
            return "data"
        return Path(parts.path).name or parts.hostname or "data"
    return Path(location).name


def organisation_roots(slug: str) -> list[Path]:
    """Each organisation stages only from its own folder, `<root>/<slug>/`, under each staging root."""
    return [root / slug for root in settings.E31_STAGING_ROOTS]


def within(path: Path, roots: list[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def server_path(raw: str, slug: str) -> Path:
    """The regular file `raw` names, if it lies in the organisation's folder once every link is followed.

    One message covers every refusal, so the check cannot be used to learn what exists elsewhere."""
    roots = organisation_roots(slug)
    if not roots:
        raise SourceError("Server paths are not enabled here: the operator has set no staging roots.")
    refusal = SourceError(f"{raw} is not a readable file in your staging folders ({', '.join(map(str, roots))}).")
    path = Path(raw)
    if not path.is_absolute() or not within(Path(os.path.normpath(path)), roots):
        raise refusal
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise refusal from None
    if not within(resolved, roots) or not resolved.is_file():
        raise refusal
    if (size := resolved.stat().st_size) > settings.E31_MAX_DATASET_BYTES:
        raise SourceError(over_dataset_limit(raw, size))
    return resolved


def server_folder(raw: str, slug: str) -> list[str] | None:
    """The files of the folder `raw` names, if it is one in the organisation's folder once every link is
    followed: in name order, hidden ones (Spark's _SUCCESS, .crc files) left out, each its path under `raw`
    as given. None when `raw` names no such folder: server_path then refuses it in its one message."""
    roots, path = organisation_roots(slug), Path(raw)
    if not roots or not path.is_absolute() or not within(Path(os.path.normpath(path)), roots):
        return None
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not within(resolved, roots) or not resolved.is_dir():
        return None
    files = (entry.name for entry in resolved.iterdir() if entry.is_file() and not entry.name.startswith(("_", ".")))
    return [str(path / name) for name in sorted(files)]


@contextlib.contextmanager
def _open_server_path(raw: str, slug: str) -> Iterator[BinaryIO]:
    resolved = server_path(raw, slug)
    descriptor = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW)
    # What was opened is checked, not only what was named: a path swapped since the check is refused.
    opened = Path(os.readlink(f"/proc/self/fd/{descriptor}")) if Path("/proc/self/fd").is_dir() else resolved
    if not within(opened, organisation_roots(slug)):
        os.close(descriptor)
        raise SourceError(f"{raw} changed while it was staged and now lies outside the staging roots.")
    with os.fdopen(descriptor, "rb") as stream:
        yield stream


class _Body:
    """A download's body handed from the download thread to staging a chunk at a time, as the socket
    gave it: a bounded queue between the threads, where a pipe copied every byte in and out again
    through 1 MiB of kernel buffer. A chunk the download lends (`write_lent`: a buffer of its own) is
    let go of once read: copied out by read, read1, readinto and peek, or lent on as it is by `lend`.
    Each chunk is hashed as it is handed over, on the download's thread (`raw_sha256`: the checksum staging
    records), so that staging's reading thread only hands chunks on; one stream's chunk is hashed by the
    thread that received it, while it is still in that core's cache."""

    QUEUED_CHUNKS = 16
    WAIT = 0.5  # seconds between checks that the other side is still there

    def __init__(self):
        self.chunks: queue.Queue[tuple[bytes, Callable[[], None] | None] | None] = queue.Queue(self.QUEUED_CHUNKS)
        self.stopped = threading.Event()  # staging stopped reading (cancelled, or storage failed)
        self.rest = memoryview(b"")  # what a short read left of the chunk it took
        self.done: Callable[[], None] | None = None  # lets go of the lent chunk under way
        self.spent: list[Callable[[], None]] = []  # lent chunks read through, let go of once copied out
        self.sha256 = hashlib.sha256()
        self.ended = False
        self.size: int | None = None  # what copy_to_job_storage reports progress against
        self.phase = "downloading"

    def write(self, data: bytes) -> int:
        """The download thread's side: OSError once staging has stopped reading."""
        if data:  # an empty chunk would read as the end
            self.sha256.update(data)
            self._put((bytes(data), None))
        return len(data)

    def write_lent(self, data: memoryview, done: Callable[[], None]) -> None:
        """The download thread's side, for a buffer of its own: read where it is, `done` called once it
        no longer is."""
        self.sha256.update(data)
        self._put((data, done))

    def raw_sha256(self) -> str:
        """The SHA-256 of every byte handed over."""
        return self.sha256.hexdigest()

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            self._put(None)

    def _put(self, chunk: tuple[bytes, Callable[[], None] | None] | None) -> None:
        while not self.stopped.is_set():
            try:
                self.chunks.put(chunk, timeout=self.WAIT)
                return
            except queue.Full:
                continue
        raise OSError("staging stopped reading the download")

    def read(self, size: int = -1) -> bytes:
        """Staging's side: `size` bytes (all that is left for -1), fewer only at the end, as a file
        reads (storage on S3 takes a short read for the end, and would upload all in one request).
        A chunk that is all that was asked for is handed over as it came, not copied."""
        parts: list[memoryview] = []
        wanted = 0
        while (size < 0 or wanted < size) and (part := self._take(size - wanted if size >= 0 else -1)):
            parts.append(part)
            wanted += len(part)
        data = _as_bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
        self._let_go()
        return data

    def read1(self, size: int = -1) -> bytes:
        """Up to `size` bytes of one chunk, as it came when it is no larger: for a writer that takes
        any size (job storage on the filesystem), no bytes copied to join chunks."""
        data = _as_bytes(self._take(size))
        self._let_go()
        return data

    def peek(self, size: int) -> bytes:
        """The first `size` bytes still to be read (fewer only at the end), left to be read: whether the
        data is compressed is known from them."""
        while len(self.rest) < size and not self.ended:
            item = self.chunks.get()
            if item is None:
                self.ended = True
            elif not self.rest:  # the chunk as it came (a lent one stays page-aligned for direct writes)
                self.rest, self.done = memoryview(item[0]), item[1]
            else:
                self.rest = memoryview(bytes(self.rest) + item[0])
                self.spent += [done for done in (self.done, item[1]) if done]  # copied: let go of
                self.done = None
                self._let_go()
        return bytes(self.rest[:size])

    def readinto(self, buffer) -> int:
        """Up to len(buffer) bytes of one chunk into `buffer`, as a raw file reads; 0 at the end. The
        staged copy's reused buffers are filled whole from these reads."""
        part = self._take(len(buffer))
        memoryview(buffer)[: len(part)] = part
        self._let_go()
        return len(part)

    def lend(self, borrowers: int) -> Iterator[tuple[memoryview, Callable[[], None]]]:
        """Each chunk as it is, not copied (a lent one is the download's own buffer), with what each of its
        `borrowers` calls once it no longer reads it: the last one lets the chunk go."""
        while part := self._take(-1):
            done, self.done = self.done, None
            yield part, _Shared(done, borrowers) if done else _nothing

    def _let_go(self) -> None:
        if not self.rest and self.done:
            self.spent.append(self.done)
            self.done = None
        while self.spent:
            self.spent.pop()()

    def _take(self, size: int) -> memoryview:
        """Up to `size` bytes (-1: any number) of the chunk under way, or of the next; empty at the end."""
        if not self.rest:
            if self.done:  # read through: let go of once the read under way has copied it
                self.spent.append(self.done)
            item = None if self.ended else self.chunks.get()
            if item is None:
                self.ended = True
                self.done = None
                return memoryview(b"")
            chunk, self.done = item
            self.rest = memoryview(chunk)
        taken = self.rest if size < 0 else self.rest[:size]
        self.rest = self.rest[len(taken) :]
        return taken

    def close(self) -> None:
        self.stopped.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self.chunks.get_nowait()


def _as_bytes(part: memoryview) -> bytes:
    return part.obj if isinstance(part.obj, bytes) and len(part) == len(part.obj) else bytes(part)


def _nothing() -> None:
    return None


class _Shared:
    """What each borrower of a lent chunk calls once done with it: the last one lets the chunk go."""

    def __init__(self, done: Callable[[], None], borrowers: int):
        self.done, self.borrowers = done, borrowers
        self.calls = itertools.count(1)  # next() on it is atomic: borrowers call from their own threads

    def __call__(self) -> None:
        if next(self.calls) == self.borrowers:
            self.done()


class _Download(threading.Thread):
    """A URL's body (an S3 object's: `_S3Download`) fetched in a thread of its own, so that staging reads
    it as it arrives and writes it straight into job storage: no temporary copy of the whole dataset."""

    def __init__(self, url: str):
        super().__init__(name="e31-download", daemon=True)
        self.url = url
        self.body = _Body()
        self.headers_seen = threading.Event()
        self.error: fetch.FetchError | s3.S3Error | None = None

    def _heard(self, length: int | None) -> None:
        self.body.size = length
        self.headers_seen.set()

    def get(self) -> None:
        fetch.fetch(
            self.url,
            self.body,
            max_bytes=settings.E31_MAX_DATASET_BYTES,
            allowed_hosts=settings.E31_STAGING_ALLOWED_HOSTS,
            on_length=self._heard,
        )

    def run(self) -> None:
        try:
            self.get()
        except (fetch.FetchError, s3.S3Error) as error:
            self.error = error
        except OSError:
            pass  # staging stopped reading (cancelled, or storage failed): it says why
        except Exception:
            log.exception("the download of %s failed", redacted(self.url))
            self.error = fetch.FetchError("The download failed on our side; the operators can see why.")
        finally:
            self.headers_seen.set()
            self.body.finish()


class _S3Download(_Download):
    """An S3 object read in parallel ranged GETs (s3_reads.stream) in a thread of its own, as a URL is."""

    def __init__(self, uri: str, credentials: dict | None):
        super().__init__(uri)
        self.credentials = credentials

    def get(self) -> None:
        from jobs.staging import s3_reads  # noqa: PLC0415 (boto3: loaded where S3 is read)

        limit = settings.E31_MAX_DATASET_BYTES
        s3_reads.stream(self.url, self.credentials, self.body, max_bytes=limit, on_length=self._heard)


@contextlib.contextmanager
def _download(download: _Download) -> Iterator[BinaryIO]:
    download.start()
    try:
        download.headers_seen.wait()
        if download.error:
            raise SourceError(str(download.error))
        try:
            yield download.body
        except compressed.CompressedError:
            download.join()
            if download.error:  # the connection ended early: that, not the compressed data cut short, is why
                raise SourceError(str(download.error)) from None
            raise
        download.join()
        if download.error:
            raise SourceError(str(download.error))  # after the first byte: the copy in storage is discarded
    finally:
        download.body.close()
        download.join(timeout=60)


def _download_s3(job: Job, progress: StagingProgress) -> contextlib.AbstractContextManager[BinaryIO]:
    """An object streamed as a URL is; a prefix gathered into one dataset in a temporary file first."""
    credentials = s3.unseal(job.source_secret) if job.source_secret else None
    if not s3.parse(job.source_uri).is_prefix:
        return _download(_S3Download(job.source_uri, credentials))
    return _gathered_s3(job.source_uri, credentials, progress)


@contextlib.contextmanager
def _gathered_s3(uri: str, credentials: dict | None, progress: StagingProgress) -> Iterator[BinaryIO]:
    with tempfile.TemporaryFile(dir=settings.FILE_UPLOAD_TEMP_DIR) as scratch:
        from jobs.staging import s3_reads  # noqa: PLC0415 (boto3: loaded where S3 is read)

        try:
            s3_reads.download_prefix(uri, credentials, scratch, progress)
        except s3.S3Error as error:
            raise SourceError(str(error)) from None
        scratch.seek(0)
        yield scratch


def check(location: str, slug: str, s3_credentials: dict | None = None) -> None:
    """At submit time: a URL's scheme and address, an S3 URI and who may read it, or a server path's
    place under the roots. A location is used as typed: one with a character that does not show is refused."""
    if hidden := hidden_character(location):
        raise SourceError(
            f"The location contains {hidden}, an invisible or control character; "
            "a location is used exactly as typed, so type it again without it."
        )
    if s3_credentials and kind_of(location) != Job.Source.S3:
        raise SourceError("S3 credentials go with an s3:// location only.")
    if kind_of(location) == Job.Source.S3:
        try:
            s3.check(location, slug, s3_credentials)
        except s3.S3Error as error:
            raise SourceError(str(error)) from None
    elif kind_of(location) == Job.Source.URL:
        try:
            fetch.check_url(location, settings.E31_STAGING_ALLOWED_HOSTS)
        except fetch.FetchError as error:
            raise SourceError(str(error)) from None
    else:
        server_path(location, slug)


def copy_model(location: str, slug: str, into: BinaryIO, s3_credentials: dict | None = None) -> str:
    """A model at an http(s) URL, an s3:// URI (an object, or a prefix holding the folder's files) or a
    server path, copied into `into` when the job is submitted, since a model is checked before its job is
    made; its name (a prefix's folder name, as a .tar). The URL passes the SSRF guard; S3 is read with
    the credentials given with the job, else only in the organisation's folder of the operator's buckets."""
    check(location, slug, s3_credentials)
    kind = kind_of(location)
    name = name_of(location)
    if kind == Job.Source.PATH and server_path(location, slug).stat().st_size > settings.E31_MAX_MODEL_BYTES:
        raise SourceError(f"{location} is larger than the {settings.E31_MAX_MODEL_BYTES:,}-byte limit for a model.")
    if kind == Job.Source.S3:
        from jobs.staging import s3_reads  # noqa: PLC0415 (boto3: loaded where S3 is read)

        try:
            s3_reads.copy_model(location, s3_credentials, into)
        except s3.S3Error as error:
            raise SourceError(str(error)) from None
        name = f"{name}.tar" if s3.parse(location).is_prefix else name
    elif kind == Job.Source.URL:
        try:
            fetch.fetch(
                location, into, max_bytes=settings.E31_MAX_MODEL_BYTES, allowed_hosts=settings.E31_STAGING_ALLOWED_HOSTS
            )
        except fetch.FetchError as error:
            raise SourceError(str(error)) from None
    else:
        with _open_server_path(location, slug) as stream:
            shutil.copyfileobj(stream, into, 8 * 1024 * 1024)
    into.seek(0)
    return name


def recorded(location: str) -> str:
    """A location as the job records it: a URL without its query (a pre-signed URL's signature)."""
    return redacted(location) if kind_of(location) == Job.Source.URL else location


def open_source(job: Job, progress: StagingProgress) -> contextlib.AbstractContextManager[BinaryIO]:
    """The job's data as a binary stream, wherever it comes from (a URL is downloaded first); a dataset of
    several parts, the parts joined (jobs.staging.parts)."""
    if job.source_parts:
        return parts.joined(job, progress, _open_server_path)
    return _uncompressed(job, _opened(job, progress))


def _opened(job: Job, progress: StagingProgress) -> contextlib.AbstractContextManager[BinaryIO]:
    if job.source_kind == Job.Source.URL:
        return _download(_Download(job.source_uri))
    if job.source_kind == Job.Source.S3:
        return _download_s3(job, progress)
    if job.source_kind == Job.Source.PATH:
        return _open_server_path(job.source_uri, job.organisation.slug)
    return default_storage.open(job.source_path, "rb")


@contextlib.contextmanager
def _uncompressed(job: Job, opened: contextlib.AbstractContextManager[BinaryIO]) -> Iterator[BinaryIO]:
    """The data as staged: compressed (known from its first bytes), decompressed as it is read, and once
    it is all read, its compression and bytes as sent recorded on the job; else as it is (a file on this
    machine is then still copied by the kernel)."""
    with opened as raw:
        if compressed.sniff(compressed.peek(raw) or b"") is None:
            yield raw
            return
        stream = compressed.open_decompressed(raw, job.source_location or job.source_name)
        yield stream
        Job.objects.filter(pk=job.pk).update(input_compression=stream.compression, sent_bytes=stream.raw_bytes)


def forget(job: Job) -> None:
    """Once staging no longer needs them: delete the job's upload, wipe its S3 credentials and a URL's
    query (a pre-signed URL's signature)."""
    if job.source_path:
        default_storage.delete(job.source_path)
        Job.objects.filter(pk=job.pk, source_path=job.source_path).update(source_path="")
    if job.source_secret:
        Job.objects.filter(pk=job.pk).update(source_secret="")
    if job.source_location != job.source_uri:
        Job.objects.filter(pk=job.pk).update(source_uri=job.source_location)
    parts.forget(job)
