"""The staged copy: the job's source copied into job storage, checksummed (SHA-256) and counted as
it passes, and a CSV's records scanned along the way for describing to use."""

import errno
import functools
import hashlib
import io
import mmap
import os
import queue
import stat
import threading
from collections.abc import Callable, Iterator

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, default_storage

from jobs.models import Job
from jobs.staging import fastcsv, shards, sources
from jobs.staging.progress import StagingProgress

DIRECT_FROM = 512 * 1024 * 1024  # a copy this large is written past the page cache (_direct)
DIRECT_ALIGN = 4096  # what direct writes need of offsets and lengths: the largest block size of a disk
CHANGED = "The file changed while it was staged; stage it again once it is complete."


class _Hashing(io.RawIOBase):
    """A read-only stream that checksums each chunk read through it as it passes, hands it to the scan
    (on a thread of its own) and counts the bytes. Storage reads it in 1 MiB chunks and gets the
    source's own bytes: no copy between. The checksum is taken in the reading thread while the chunk
    is still in the core's cache: from a thread of its own, later, it cost a third more and left the
    reading thread idle."""

    CHUNK = 1024 * 1024

    def __init__(self, source, progress: StagingProgress, along: fastcsv.ScanAlong):
        self.source = source
        self.progress = progress
        self.along = along
        # A source that hashes its bytes as sent (compressed data, a dataset's parts) gives the job's checksum.
        self.sha256 = None if hasattr(source, "raw_sha256") else hashlib.sha256()
        self.bytes = 0
        # Progress counts the bytes as sent where only their size is known (compressed data, see _total).
        self.sent = _size(source) is None and getattr(source, "sent_size", None) is not None

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(self.CHUNK), b""))
        return self._passed_on(self.source.read(size))

    def read1(self, size: int) -> bytes:
        """At most `size` bytes, as the source has them (a download: the chunk the socket gave), for
        a writer that takes any size; read() fills `size` from chunks joined."""
        return self._passed_on(getattr(self.source, "read1", self.source.read)(size))

    def _passed_on(self, data, done: Callable[[], None] | None = None):
        if data:
            if self.sha256 is not None:
                self.sha256.update(data)  # hashlib lets go of the GIL: the scan and the writes go on
            self.along.feed(data, done)
            self.bytes += len(data)
            self.progress.advance(self.source.raw_bytes if self.sent else self.bytes)
        return data

    def lent(self, chunks: Iterator[tuple[memoryview, Callable[[], None]]]):
        """The chunks (a ring's buffers, or a download's own), each checksummed and lent to the scan; the
        caller lends it on (to the writer), and each calls its `done`."""
        for data, done in chunks:
            yield self._passed_on(data, done), done

    def hexdigest(self) -> str:
        return self.source.raw_sha256() if self.sha256 is None else self.sha256.hexdigest()


class _Ring:
    """The few buffers the source (a file on this machine, or a large download) is read into in turn,
    each lent to the scan and the writer and filled again once both have let go of it. The bytes then
    go into memory that stays in the processor's cache while the checksum, the scan and the write read
    them, where a fresh buffer for each chunk was read from memory by each of them, after page faults."""

    BUFFERS = 8
    BORROWERS = 2  # the scan and the writer

    def __init__(self, size: int):
        self.buffers = [mmap.mmap(-1, size) for _ in range(self.BUFFERS)]  # page-aligned, as direct writes need
        self.lent = [0] * self.BUFFERS
        self.lock = threading.Lock()
        self.free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(self.BUFFERS):
            self.free.put(index)

    def fill(self, source) -> tuple[memoryview, Callable[[], None]] | None:
        """The next bytes of `source` in a free buffer, with what each borrower calls when done; None at
        its end. The buffer is filled (short only at the end): a file read as it grows gives short reads,
        and the scan holds what it is lent until it has the header, which a ring of small pieces could
        leave it waiting for while the reading thread waits for a buffer."""
        index = self.free.get()
        buffer, count = memoryview(self.buffers[index]), 0
        while count < len(buffer) and (read := source.readinto(buffer[count:])):
            count += read
        if not count:
            return None
        self.lent[index] = self.BORROWERS
        return buffer[:count], functools.partial(self._returned, index)

    def _returned(self, index: int) -> None:
        with self.lock:
            self.lent[index] -= 1
            if not self.lent[index]:
                self.free.put(index)


class _Staged(File):
    """The data as storage saves it, in 1 MiB writes rather than Django's 64 KiB: a sixteenth of the
    system calls."""

    DEFAULT_CHUNK_SIZE = _Hashing.CHUNK


class _NoScan:
    """In place of the scan, for a copy read behind its writer (jobs.staging.streaming): lets go at once."""

    def feed(self, data, done: Callable[[], None] | None = None) -> None:
        if done:
            done()

    def finish(self) -> None:
        return None


def copy_to_job_storage(
    job: Job, target: str, progress: StagingProgress, scan: bool = True
) -> tuple[str, int, str, fastcsv.Scanned | None]:
    """Copy the job's source into its storage at `target`; return the staged path, bytes, sha256, and
    what a scan of its CSV records beside the copy found (none without `scan`)."""
    along = hashing = None
    try:
        with sources.open_source(job, progress) as source:
            size = _size(source)
            progress.phase(getattr(source, "phase", "copying"), _total(source, size))
            along = (
                _NoScan()
                if not scan
                else fastcsv.ScanAlong(job.source_name, shards.grain(job), shards.MAX_CUT_POINTS, size)
            )
            hashing = _Hashing(source, progress, along)
            default_storage.delete(target)  # what an interrupted attempt left
            if isinstance(default_storage, FileSystemStorage):
                path = _save_to_filesystem(hashing, source, target)
            else:
                path = default_storage.save(target, _Staged(hashing, name="data"))
    finally:
        scanned = along and along.finish()
        sha256 = hashing and hashing.hexdigest()
    return path, hashing.bytes, sha256, scanned


def _local_file(source) -> bool:
    try:
        return stat.S_ISREG(os.fstat(source.fileno()).st_mode)
    except (AttributeError, OSError, io.UnsupportedOperation):
        return False


def _save_to_filesystem(hashing: _Hashing, source, target: str) -> str:
    """Into job storage on this machine's filesystem: storage names and creates the file, and each
    piece goes into it, on a thread of its own, right after it is read for the checksum and the scan.
    A download's pieces are lent on in the buffers it filled them in, not copied; a file on this
    machine, and another source large enough to be written directly, are read into the ring's buffers;
    other pieces (data decompressed, parts joined) are written as they came, whatever their size."""
    path = default_storage.save(target, ContentFile(b""))  # the name, folders and permissions, as storage sets them
    local = _local_file(source)
    before = local and _identity(source)
    with open(default_storage.path(path), "r+b") as out:
        direct = _direct(out.name, _size(source)) if hasattr(source, "readinto") else None
        if local and direct is None:
            writer = _Writer(out.fileno(), source=source.fileno(), start=source.tell())
        else:
            writer = _Writer(out.fileno(), direct=direct)
        try:
            if hasattr(source, "lend"):
                for data, done in hashing.lent(source.lend(_Ring.BORROWERS)):
                    writer.put(data, done)
            elif local or direct is not None:
                for data, done in hashing.lent(iter(functools.partial(_Ring(_Hashing.CHUNK).fill, source), None)):
                    writer.put(data, done)
            else:
                while data := hashing.read1(_Hashing.CHUNK):
                    writer.put(data)
        except BaseException:
            writer.close(abandon=True)  # stopped or failed: the pieces still queued are not written
            raise
        if failed := writer.close():
            raise failed
    if local and _identity(source) != before:
        raise sources.SourceError(CHANGED)
    return path


def _direct(path: str, size: int | None) -> int | None:
    """A second descriptor of the copy at `path` that writes past the page cache (O_DIRECT), for a copy
    of DIRECT_FROM bytes or more; None for a smaller one, or where the filesystem cannot (tmpfs).

    A large copy written through the page cache fills memory with pages the pass reads once, if it
    reads them before they are evicted, and taking that memory was the largest and least steady part
    of staging's cost: 0.3 to 3 core-seconds per GB on this project's VMs, where the direct writes
    cost almost nothing of this machine's (docs/benchmarks.md). A smaller copy is left in the page
    cache, where the pass that follows soon after finds it."""
    if size is None or size < DIRECT_FROM or not hasattr(os, "O_DIRECT"):
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError:
        return None


class _Writer:
    """Writes the staged copy beside the reading thread, piece by piece as they are read. From a file
    on this machine (`source`) the kernel copies each piece (copy_file_range: no byte passes through
    this process, and a filesystem that can reflinks or copies server-side); where it cannot between
    these two files, the piece is read again and written. Otherwise the bytes read are written, past
    the page cache through `direct` where they are aligned as it needs. Writing from the reading thread
    had cost more than reading and checksumming."""

    QUEUED_PIECES = 16

    def __init__(self, out: int, source: int | None = None, start: int = 0, direct: int | None = None):
        self.out, self.source, self.direct = out, source, direct
        self.start = start  # where in the source the copy begins
        self.queued = 0  # bytes handed over so far: where the next piece goes in the copy
        self.by_kernel = source is not None and hasattr(os, "copy_file_range")  # Linux
        self.pieces: queue.Queue[tuple[int, bytes | int, Callable[[], None] | None] | None] = queue.Queue(
            maxsize=self.QUEUED_PIECES
        )
        self.error: Exception | None = None
        self.abandoned = False
        self.thread = threading.Thread(target=self._run, name="e31-write-along", daemon=True)
        try:
            self.thread.start()
        except BaseException:  # no thread to be had (the process at its limit): close() will never run
            if direct is not None:
                os.close(direct)
            raise

    def put(self, data, done: Callable[[], None] | None = None) -> None:
        """Write `data`, the next bytes read from the source, after those before it; `done` is called
        once `data` is no longer read (at once when the kernel copies the piece from the source)."""
        if self.error:
            raise self.error  # stop reading: the copy cannot be made
        count = len(data)
        if self.source is not None:  # copied from the source: `data` is not read
            if done:
                done()
            data, done = count, None
        self.pieces.put((self.queued, data, done))
        self.queued += count

    def close(self, abandon: bool = False) -> Exception | None:
        """Once every piece is written (none more, with `abandon`): what failed, if anything did."""
        self.abandoned = abandon
        self.pieces.put(None)
        self.thread.join()
        if self.direct is not None:
            os.close(self.direct)
        return self.error

    def _run(self) -> None:
        while (piece := self.pieces.get()) is not None:
            at, data, done = piece
            try:
                if self.error or self.abandoned:
                    continue  # drained, so the reading thread is never left waiting on a full queue
                if isinstance(data, int):
                    self._copy(at, data)
                else:
                    self._write(at, data)
            except Exception as error:  # a full disk (OSError), or a bug: either way the reading thread hears it
                self.error = error
            finally:
                if done:
                    done()

    def _copy(self, at: int, count: int) -> None:
        """Copy `count` bytes of the source, from `at` on in the copy."""
        if self.by_kernel:
            self.by_kernel = _copy_range(self.source, self.out, self.start + at, at, count)
        if not self.by_kernel:  # not between these two filesystems: read and write them here
            _write_at(self.out, os.pread(self.source, count, self.start + at), at)

    def _write(self, at: int, data) -> None:
        """Write `data` at `at` in the copy: directly where it is aligned (the last piece is not)."""
        if self.direct is not None and not (at | len(data)) % DIRECT_ALIGN:
            try:
                return _write_at(self.direct, data, at)
            except OSError as error:
                if error.errno != errno.EINVAL:
                    raise
                os.close(self.direct)  # a filesystem that opened it but takes no direct writes
                self.direct = None
        _write_at(self.out, data, at)


def _write_at(out: int, data: bytes, at: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(out, view, at)
        view, at = view[written:], at + written


def _identity(source) -> tuple:
    """What changes when a file is written to: a copy made while it changed is no copy of what was hashed."""
    found = os.fstat(source.fileno())
    return found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


def _copy_range(source: int, out: int, offset: int, at: int, count: int) -> bool:
    """Copy by the kernel; False when it cannot between these files (then nothing it did counts)."""
    while count:
        try:
            copied = os.copy_file_range(source, out, count, offset, at)
        except OSError as error:
            if error.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
                return False
            raise
        if not copied:
            return False  # some filesystems (FUSE, /proc) copy nothing; a file cut short fails the check after
        offset, at, count = offset + copied, at + copied, count - copied
    return True


def _total(source, size: int | None) -> int | None:
    """What staging's progress counts to: the source's size, or for compressed data its size as sent (its
    bytes as sent counted then, _Hashing): the page's percent staged is of the data on the wire."""
    return size if size is not None else getattr(source, "sent_size", None)


def _size(stream) -> int | None:
    if hasattr(stream, "size"):  # a Django file, or a download that announced its length
        return stream.size
    try:
        return os.fstat(stream.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
