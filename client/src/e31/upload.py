"""Resumable uploads (tus 1.0) of a local file.

The file is read one chunk at a time at its offset, so memory stays at a chunk whatever the file's
size; each chunk goes with its CRC-32, and the portal keeps only a chunk that arrived whole. The
upload's URL is remembered in the user's cache folder under (server, absolute path, size, mtime):
the same command run again after a dropped network or a Ctrl-C asks the portal for the offset it
confirmed and goes on from there, or starts over when the portal says the upload is gone. Size and
mtime do not prove the bytes are the same (an edit can keep both), so before it goes on, the client reads
the file up to that offset, a block at a time, and compares its CRC-32 with the portal's of the bytes it
has; when they differ, or the portal gives none, it discards that upload and starts over, saying why.
"""

import base64
import contextlib
import hashlib
import json
import logging
import os
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import platformdirs

from e31.errors import APIError
from e31.schema import UploadOffset

log = logging.getLogger("e31")


class UploadServer(Protocol):
    """What an upload needs of the client (e31.client.Client): its portal's address and the tus requests."""

    url: str

    def create_upload(self, length: int, filename: str, key: str | None = None) -> str: ...

    def upload_offset(self, upload_url: str) -> UploadOffset: ...

    def upload_chunk(self, upload_url: str, offset: int, chunk: "bytes | FileSpan", checksum: str) -> int: ...

    def delete_upload(self, upload_url: str) -> None: ...


# Each chunk costs the portal a fixed time (a request, its fsync and database write), so larger chunks go faster
# (docs/benchmarks.md) in the same memory; a chunk cut off is sent again whole.
CHUNK_SIZE = 64 * 1024 * 1024
BLOCK = 1024 * 1024
RETRIES = 8
# Answers after which the same chunk is sent again: another request still writing the upload (423), a
# chunk that arrived damaged (460), an offset that moved under us (409), a server or proxy in trouble.
RETRIED = frozenset({409, 423, 460, 500, 502, 503, 504})
GONE = frozenset({404, 410})


def metadata(filename: str) -> str:
    """tus's Upload-Metadata for the file's name."""
    return "filename " + base64.b64encode(filename.encode()).decode()


def checksum(blocks: bytes | Iterable[bytes]) -> str:
    """tus's Upload-Checksum of a chunk (its bytes, or its blocks): `crc32 <base64 of its four bytes, big-endian>`. A
    CRC-32, as S3's uploads are checked, catches a chunk damaged on the way at under half the CPU of a
    SHA-256, which held the upload back (docs/benchmarks.md); the staged copy's SHA-256 is the job's."""
    value = 0
    for block in [blocks] if isinstance(blocks, bytes) else blocks:
        value = zlib.crc32(block, value)
    return "crc32 " + base64.b64encode(value.to_bytes(4, "big")).decode()


def resume_key(server: str, path: Path, size: int, mtime_ns: int) -> str:
    """What names an upload in progress: the same file (its absolute path, size and mtime) to the same
    portal. A file changed since is another upload."""
    facts = json.dumps([server.rstrip("/"), str(path.absolute()), size, mtime_ns])
    return hashlib.sha256(facts.encode()).hexdigest()[:32]


def chunk_spans(offset: int, size: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """(start, length) of each chunk from `offset` to the end of `size` bytes."""
    if chunk_size < 1:
        raise ValueError(f"A chunk has at least one byte, not {chunk_size}.")
    for start in range(offset, size, chunk_size):
        yield start, min(chunk_size, size - start)


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt `attempt` (1, 2, ...) after a failure: 0.5, 1, 2, 4, ... up to 30."""
    return min(30.0, 0.5 * 2 ** (attempt - 1))


def wait_to_retry(error: Exception, failures: int, retries: int, what: str) -> None:
    """After the `failures`-th failure in a row that may pass: say so and wait the backoff, or raise `error`
    once more than `retries` came."""
    if failures > retries:
        raise error
    pause = backoff(failures)
    log.warning("%s interrupted (%s); going on in %g s.", what, error or type(error).__name__, pause)
    time.sleep(pause)


class ResumeStore:
    """The uploads in progress on this machine: one small JSON file each, in the user's cache folder."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder or Path(platformdirs.user_cache_dir("e31")) / "uploads"

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> str | None:
        return self.state(key).get("url")

    def state(self, key: str) -> dict:
        """All that is remembered of the upload (its URL and what put() and note() added); {} for none."""
        try:
            state = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) and isinstance(state.get("url"), str) else {}

    def note(self, key: str, **facts: object) -> None:
        """Add `facts` to a remembered upload's state."""
        state = self.state(key)
        if state:
            self.put(key, **{**state, **facts})

    def put(self, key: str, url: str, **facts: object) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        scratch = self._path(key).with_suffix(".new")
        scratch.write_text(json.dumps({"url": url, **facts}), encoding="utf-8")
        os.replace(scratch, self._path(key))

    def forget(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


@dataclass
class Uploaded:
    """A finished upload: its id (what a job's data names), URL and resume key; `resumed_from` is the
    offset it went on from (None for a new upload) and `sent` the bytes this run sent."""

    upload_id: str
    url: str
    key: str
    size: int
    resumed_from: int | None
    sent: int


def upload_file(
    client: UploadServer,
    path: Path,
    *,
    chunk_size: int = CHUNK_SIZE,
    store: ResumeStore | None = None,
    progress: Callable[[int, int], None] | None = None,
    retries: int = RETRIES,
    forget_when_done: bool = True,
) -> Uploaded:
    """Upload `path`, going on from an earlier upload of the same file when the portal still has it.
    `progress(offset, size)` hears each confirmed offset. With forget_when_done=False the finished
    upload stays remembered (until store.forget(key)), so a job refused after it can reuse it."""
    store = store or ResumeStore()
    stat = path.stat()
    size = stat.st_size
    key = resume_key(client.url, path, size, stat.st_mtime_ns)
    url, offset = _resumed(client, store, key, path)
    resumed_from = offset if url else None
    if url is None:
        url = client.create_upload(size, path.name)
        store.put(key, url, server=client.url, path=str(path.absolute()), size=size, mtime_ns=stat.st_mtime_ns)
    if progress:
        progress(offset, size)
    sent = _send(client, url, path, offset, size, chunk_size, progress, retries)
    if forget_when_done:
        store.forget(key)
    return Uploaded(url.rstrip("/").rsplit("/", 1)[-1], url, key, size, resumed_from, sent)


def _resumed(client: UploadServer, store: ResumeStore, key: str, path: Path) -> tuple[str | None, int]:
    """The remembered upload of this file and the offset the portal confirmed; (None, 0) when there is
    none, the portal no longer has it, or what it has is not the file's beginning (said, and discarded)."""
    url = store.get(key)
    if url is None:
        return None, 0
    try:
        found = client.upload_offset(url)
    except APIError as error:
        if error.status not in GONE:
            raise
        log.info("The portal no longer has the earlier upload of this file; starting over.")
        store.forget(key)
        return None, 0
    offset, theirs = found["offset"], found["checksum"]
    if offset == 0 or theirs == prefix_checksum(path, offset):
        return url, offset
    if theirs is None:
        log.warning(
            "The portal cannot say what its %s bytes of %s hold, so the upload starts over.", f"{offset:,}", path.name
        )
    else:
        log.warning(
            "%s changed since its upload began: its first %s bytes are not those the portal has, "
            "so the upload starts over.",
            path.name,
            f"{offset:,}",
        )
    store.forget(key)
    with contextlib.suppress(APIError):  # else the portal keeps the stale bytes until the upload expires
        client.delete_upload(url)
    return None, 0


def prefix_checksum(path: Path, length: int) -> str | None:
    """The CRC-32 of the file's first `length` bytes, as the portal gives it for the bytes it has (read a block at
    a time); None when the file is shorter."""
    with path.open("rb") as handle:
        try:
            return checksum(FileSpan(path, handle.fileno(), 0, length))
        except OSError:
            return None


class FileSpan:
    """`length` bytes of the file from `offset`, as a request's body: read a block at a time as it goes
    out, so a chunk of any size costs a block of memory. Each iteration reads the file afresh (a chunk
    sent again is read again), and raises OSError where the file ends early."""

    def __init__(self, path: Path, descriptor: int, offset: int, length: int):
        self.path, self.descriptor, self.offset, self.length = path, descriptor, offset, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[bytes]:
        offset, left = self.offset, self.length
        while left:
            block = os.pread(self.descriptor, min(BLOCK, left), offset)
            if not block:
                end = offset + left
                raise OSError(f"{self.path} ends at byte {offset}, before byte {end}: it changed while uploading.")
            offset += len(block)
            left -= len(block)
            yield block


class ChunkReader:
    """The file's chunks (FileSpan) with their checksums. The checksum of the next chunk is taken in a
    thread while the current one is on the wire (reading and zlib release the GIL); the chunk is read
    again as it is sent, from the page cache, so memory stays at a few blocks whatever the chunk size."""

    def __init__(self, path: Path, size: int, chunk_size: int):
        self.path, self.size, self.chunk_size = path, size, chunk_size
        self.handle = path.open("rb")
        self.reader = ThreadPoolExecutor(1, thread_name_prefix="e31-read")
        self.ahead: tuple[int, Future[tuple[FileSpan, str]]] | None = None

    def _read(self, offset: int) -> tuple[FileSpan, str]:
        span = FileSpan(self.path, self.handle.fileno(), offset, min(self.chunk_size, self.size - offset))
        return span, checksum(span)

    def at(self, offset: int) -> tuple[FileSpan, str]:
        """The chunk at `offset` and its checksum; the checksum of the one after it starts being taken."""
        ahead, self.ahead = self.ahead, None
        found = ahead[1].result() if ahead and ahead[0] == offset else self._read(offset)
        following = offset + len(found[0])
        if following < self.size:
            self.ahead = (following, self.reader.submit(self._read, following))
        return found

    def close(self) -> None:
        self.reader.shutdown(wait=True, cancel_futures=True)
        self.handle.close()


def _send(
    client: UploadServer,
    url: str,
    path: Path,
    offset: int,
    size: int,
    chunk_size: int,
    progress: Callable[[int, int], None] | None,
    retries: int,
) -> int:
    """PATCH the chunks from `offset`; after a dropped connection or a retried answer, wait, ask the
    portal where it stands (HEAD) and go on from there. The bytes sent."""
    sent = failures = 0
    in_doubt = False
    chunks = ChunkReader(path, size, chunk_size)
    try:
        while in_doubt or offset < size:
            try:
                if in_doubt:
                    offset = client.upload_offset(url)["offset"]
                    in_doubt = False
                    if progress:
                        progress(offset, size)
                    continue
                chunk, digest = chunks.at(offset)
                sent += len(chunk)
                offset = client.upload_chunk(url, offset, chunk, digest)
                failures = 0
                if progress:
                    progress(offset, size)
            except (httpx.TransportError, APIError) as error:
                if isinstance(error, APIError) and error.status not in RETRIED:
                    raise
                failures += 1
                wait_to_retry(error, failures, retries, "Upload")
                in_doubt = True
    finally:
        chunks.close()
    return sent
