"""Resumable uploads on tus 1.0 (https://tus.io/protocols/resumable-upload): the core protocol and
the creation, termination, expiration and checksum extensions.

A client creates an upload with its length and file name, then sends the bytes in chunks, each with
the offset it starts at and, best, a checksum. Only a chunk that starts at the confirmed offset is
taken; a chunk whose checksum fails leaves the upload as it was. The CRC-32 of the confirmed bytes is kept
with the offset (each chunk's folded in, `crc32_combine`), so a client that comes back to resume can check
that its file still begins with what the portal has. The body is streamed to the upload's
file in blocks, never held in memory, and on disk before its offset is confirmed: a thread writes the
blocks out behind the request as they arrive, so the fsync at the end waits only for the last few."""

import base64
import contextlib
import fcntl
import hashlib
import os
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import BinaryIO

from django.conf import settings
from django.utils import timezone

from jobs.models import Upload
from jobs.staging import over_dataset_limit
from jobs.uploads import safe_name
from portal.text import ascii_count, shown

VERSION = "1.0.0"
EXTENSIONS = "creation,termination,expiration,checksum"


class Crc32:
    """CRC-32 (zlib's, as S3's `x-amz-checksum-crc32`) with hashlib's interface; its digest is the four bytes,
    big-endian. A chunk's check against damage on the way at under half the CPU of SHA-256, the e31 client's."""

    digest_size = 4

    def __init__(self):
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(4, "big")


def _times_mod_p(a: int, b: int) -> int:
    """a × b modulo CRC-32's polynomial, both in zlib's reflected order (zlib's multmodp)."""
    product, bit = 0, 1 << 31
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ 0xEDB88320 if b & 1 else b >> 1
    return product


_X_TO_2_TO_THE = [1 << 30]  # x^(2^k) modulo the polynomial, k = 0..31: x^1, x^2, x^4, ...
for _ in range(31):
    _X_TO_2_TO_THE.append(_times_mod_p(_X_TO_2_TO_THE[-1], _X_TO_2_TO_THE[-1]))


def crc32_combine(first: int, second: int, second_length: int) -> int:
    """The CRC-32 of two runs of bytes one after the other, from each one's CRC-32 and the second's length
    (zlib's crc32_combine, which Python's zlib does not offer): the first's shifted past the second's bytes."""
    shift, bits, k = 1 << 31, second_length * 8, 0
    while bits:
        if bits & 1:
            shift = _times_mod_p(_X_TO_2_TO_THE[k % 32], shift)
        bits >>= 1
        k += 1
    return _times_mod_p(shift, first) ^ second


def crc32_header(value: int) -> str:
    """A CRC-32 as an `Upload-Checksum` is written: `crc32 <base64 of its four bytes, big-endian>`."""
    return "crc32 " + base64.b64encode(value.to_bytes(4, "big")).decode()


ALGORITHMS = {"crc32": Crc32, "sha1": hashlib.sha1, "sha256": hashlib.sha256, "md5": hashlib.md5}
CHUNK_TYPE = "application/offset+octet-stream"
# Not tus's: the answer's header that gives the CRC-32 of the bytes up to Upload-Offset, as crc32_header writes it.
OFFSET_CHECKSUM = "Upload-Offset-Checksum"
BLOCK = 1024 * 1024
FLUSH_EVERY = 8 * BLOCK
_flushes = ThreadPoolExecutor(4, thread_name_prefix="upload-flush")


class UploadError(Exception):
    """A request the upload cannot take; `status` is the HTTP answer and the message says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error, or a character past ASCII in the str
        raise UploadError(400, f"{what} is not base64.") from None


def parse_metadata(header: str) -> dict[str, str]:
    """`Upload-Metadata: filename ZGF0YS5jc3Y=,kind Y3N2`: keys with base64 values (or none)."""
    metadata = {}
    for pair in filter(None, (part.strip() for part in header.split(","))):
        key, _, value = pair.partition(" ")
        try:
            metadata[key] = _decode(value.strip(), f"The metadata value of {shown(key)}").decode()
        except UnicodeDecodeError:
            raise UploadError(400, f"The metadata value of {shown(key)} is not UTF-8 text.") from None
    return metadata


def parse_checksum(header: str) -> tuple[str, bytes] | None:
    """`Upload-Checksum: sha256 <base64 digest>`, or None when the chunk comes without one."""
    if not header:
        return None
    name, _, value = header.strip().partition(" ")
    if name not in ALGORITHMS:
        raise UploadError(400, f"Checksums in {', '.join(ALGORITHMS)} are supported, not {name or 'none'}.")
    digest = _decode(value.strip(), "The checksum")
    if len(digest) != ALGORITHMS[name]().digest_size:
        raise UploadError(400, f"A {name} checksum has {ALGORITHMS[name]().digest_size} bytes, not {len(digest)}.")
    return name, digest


def _count(value: str | None, what: str) -> int:
    count = ascii_count(value)
    if count is None:
        raise UploadError(400, f"{what} must be a whole number of bytes, not {shown(value)}.")
    return count


def renewed_expiry():
    return timezone.now() + timedelta(hours=settings.E31_UPLOAD_EXPIRY_HOURS)


def create(organisation, user, length: str | None, metadata: str) -> Upload:
    size = _count(length, "Upload-Length")
    if size == 0:
        raise UploadError(400, "The file is empty: a dataset needs at least a header and one record.")
    if size > settings.E31_MAX_DATASET_BYTES:
        raise UploadError(413, over_dataset_limit("The file", size))
    name = parse_metadata(metadata).get("filename", "")
    upload = Upload(
        organisation=organisation,
        created_by=user,
        filename=safe_name(name),
        length=size,
        expires_at=renewed_expiry(),
    )
    upload.path.touch(exist_ok=False)
    upload.save()
    return upload


@contextlib.contextmanager
def _writing(upload: Upload) -> Iterator[BinaryIO]:
    """The upload's file, open for writing by this request alone."""
    try:
        descriptor = os.open(upload.path, os.O_RDWR)
    except FileNotFoundError:
        raise UploadError(404, "The upload's data is gone; start the upload again.") from None
    with os.fdopen(descriptor, "r+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UploadError(423, "Another request is writing this upload; retry when it ends.") from None
        yield handle


class _Flusher:
    """A chunk's blocks written to disk behind it, FLUSH_EVERY bytes at a time (one fdatasync in flight),
    so the disk works while the network does and the fsync that confirms the chunk has little left.
    `wait()` before the file closes; it raises what a flush met, which a later fsync would not report."""

    def __init__(self, fileno: int):
        self.fileno = fileno
        self.unflushed = 0
        self.flushing: Future | None = None

    def wrote(self, count: int) -> None:
        self.unflushed += count
        if self.unflushed >= FLUSH_EVERY and (self.flushing is None or self.flushing.done()):
            self.wait()
            self.flushing = _flushes.submit(os.fdatasync, self.fileno)
            self.unflushed = 0

    def wait(self) -> None:
        if self.flushing is not None:
            flushing, self.flushing = self.flushing, None
            flushing.result()


def write_chunk(upload: Upload, offset: str | None, body: BinaryIO, length: str | None, checksum: str) -> int:
    """Append one chunk at the confirmed offset; the new offset, or UploadError with nothing changed."""
    if upload.expired:
        raise UploadError(410, "The upload expired and its data was deleted; start it again.")
    start = _count(offset, "Upload-Offset")
    if not length:
        raise UploadError(411, "Send the chunk with its Content-Length.")
    size = _count(length, "Content-Length")
    expected = parse_checksum(checksum)
    with _writing(upload) as handle:
        upload.refresh_from_db(fields=["offset", "crc32"])
        if start != upload.offset:
            raise UploadError(409, f"The upload is at byte {upload.offset}, not {start}: resume from there.")
        if start + size > upload.length:
            raise UploadError(400, f"The chunk ends at byte {start + size}, past the upload's {upload.length} bytes.")
        handle.seek(start)
        handle.truncate()  # what a chunk that did not complete left behind
        crc = Crc32()
        digest = crc if not expected or expected[0] == "crc32" else ALGORITHMS[expected[0]]()
        digests = (crc,) if digest is crc else (crc, digest)  # a chunk sent with its CRC-32 is read once
        received = 0
        flusher = _Flusher(handle.fileno())
        try:
            while received < size and (block := body.read(min(BLOCK, size - received))):
                handle.write(block)
                for taken in digests:
                    taken.update(block)
                received += len(block)
                handle.flush()
                flusher.wrote(len(block))
        finally:
            flusher.wait()
        if expected and (received != size or digest.digest() != expected[1]):
            handle.truncate(start)
            raise UploadError(460, "The chunk's checksum does not match what arrived: send it again.")
        os.fsync(handle.fileno())
        Upload.objects.filter(pk=upload.pk, offset=start).update(
            offset=start + received,
            crc32=None if upload.crc32 is None else crc32_combine(upload.crc32, crc.value, received),
            expires_at=renewed_expiry(),
            modified=timezone.now(),
        )
    upload.refresh_from_db(fields=["offset", "crc32", "expires_at"])
    return upload.offset


def discard(upload: Upload) -> None:
    upload.path.unlink(missing_ok=True)
    upload.delete()


def purge_abandoned() -> int:
    """Delete the uploads nobody has added to or used before they expired; how many."""
    expired = list(Upload.objects.filter(expires_at__lte=timezone.now()))
    for upload in expired:
        discard(upload)
    return len(expired)
