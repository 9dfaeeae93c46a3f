"""The staged copy: the job's source copied into job storage, checksummed (SHA-256) and counted as
it passes, and a CSV's records scanned along the way for describing to use."""

import errno
import hashlib
import io
import os
import queue
import stat
import threading

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, default_storage

from jobs.models import Job
from jobs.staging import fastcsv, shards, sources
from jobs.staging.progress import StagingProgress

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
        self.sha256 = hashlib.sha256()
        self.bytes = 0

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

    def _passed_on(self, data: bytes) -> bytes:
        if data:
            self.sha256.update(data)  # hashlib lets go of the GIL: the scan and the writes go on
            self.along.feed(data)
            self.bytes += len(data)
            self.progress.advance(self.bytes)
        return data

    def hexdigest(self) -> str:
        return self.sha256.hexdigest()


class _Staged(File):
    """The data as storage saves it, in 1 MiB writes rather than Django's 64 KiB: a sixteenth of the
    system calls."""

    DEFAULT_CHUNK_SIZE = _Hashing.CHUNK


def copy_to_job_storage(
    job: Job, target: str, progress: StagingProgress
) -> tuple[str, int, str, fastcsv.Scanned | None]:
    """Copy the job's source into its storage at `target`; return the staged path, bytes, sha256, and
    what a scan of its CSV records beside the copy found."""
    along = hashing = None
    try:
        with sources.open_source(job, progress) as source:
            size = _size(source)
            progress.phase(getattr(source, "phase", "copying"), size)
            along = fastcsv.ScanAlong(job.source_name, shards.grain(job), shards.MAX_CUT_POINTS, size)
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
    A download's pieces are written as they came, whatever their size."""
    path = default_storage.save(target, ContentFile(b""))  # the name, folders and permissions, as storage sets them
    local = _local_file(source)
    before = local and _identity(source)
    with open(default_storage.path(path), "r+b") as out:
        writer = _Writer(out.fileno(), source.fileno() if local else None, source.tell() if local else 0)
        try:
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


class _Writer:
    """Writes the staged copy beside the reading thread, piece by piece as they are read. From a file
    on this machine the kernel copies each piece (copy_file_range: no byte passes through this
    process, and a filesystem that can reflinks or copies server-side); where it cannot between these
    two files, the bytes read are written. Writing from the reading thread had cost more than reading
    and checksumming."""

    QUEUED_PIECES = 16

    def __init__(self, out: int, source: int | None, start: int):
        self.out, self.source = out, source
        self.start = start  # where in the source the copy begins
        self.queued = 0  # bytes handed over so far: where the next piece goes in the copy
        self.by_kernel = source is not None and hasattr(os, "copy_file_range")  # Linux
        self.pieces: queue.Queue[tuple[int, bytes] | None] = queue.Queue(maxsize=self.QUEUED_PIECES)
        self.error: Exception | None = None
        self.abandoned = False
        self.thread = threading.Thread(target=self._run, name="e31-write-along", daemon=True)
        self.thread.start()

    def put(self, data: bytes) -> None:
        """Write `data`, the next bytes read from the source, after those before it."""
        if self.error:
            raise self.error  # stop reading: the copy cannot be made
        self.pieces.put((self.queued, data))
        self.queued += len(data)

    def close(self, abandon: bool = False) -> Exception | None:
        """Once every piece is written (none more, with `abandon`): what failed, if anything did."""
        self.abandoned = abandon
        self.pieces.put(None)
        self.thread.join()
        return self.error

    def _run(self) -> None:
        while (piece := self.pieces.get()) is not None:
            if self.error or self.abandoned:
                continue  # drained, so the reading thread is never left waiting on a full queue
            at, data = piece
            try:
                if self.by_kernel:
                    self.by_kernel = _copy_range(self.source, self.out, self.start + at, at, len(data))
                if not self.by_kernel:  # not between these two filesystems: write what was read
                    _write_at(self.out, data, at)
            except Exception as error:  # a full disk (OSError), or a bug: either way the reading thread hears it
                self.error = error


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


def _size(stream) -> int | None:
    if hasattr(stream, "size"):  # a Django file, or a download that announced its length
        return stream.size
    try:
        return os.fstat(stream.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
