"""Output files to disk, resumable.

A file is streamed in blocks into `<name>.part` (memory stays flat whatever its size); a later run
goes on from the end of that partial file with an HTTP Range, and it is renamed to its name once
whole, after its SHA-256 is checked against the manifest's when the manifest gives one.
"""

import hashlib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypedDict

import httpx

from e31.errors import APIError
from e31.upload import wait_to_retry

log = logging.getLogger("e31")


class OutputServer(Protocol):
    """What a download needs of the client (e31.client.Client): an output file's streamed answer from an offset."""

    def open_output(self, url: str, offset: int = 0) -> httpx.Response: ...


BLOCK = 1024 * 1024
RETRIES = 8
RETRIED = frozenset({500, 502, 503, 504})
CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class Expected(TypedDict):
    """What the manifest says of an output file."""

    bytes: int
    sha256: str


class DownloadError(Exception):
    """A file that arrived, but not as the manifest says it is."""


def partial_path(target: Path) -> Path:
    return target.with_name(target.name + ".part")


def resume_offset(partial_size: int, expected_size: int | None) -> int:
    """Where a download goes on from: the end of the partial file, or its start when the partial file
    is longer than the file it is part of."""
    if expected_size is not None and partial_size > expected_size:
        return 0
    return partial_size


def range_header(offset: int) -> dict[str, str]:
    return {"Range": f"bytes={offset}-"} if offset else {}


def parse_content_range(value: str) -> tuple[int, int, int | None]:
    """`bytes 100-199/1000` as (100, 199, 1000); the total is None when it is `*`."""
    found = CONTENT_RANGE.fullmatch(value.strip())
    if not found:
        raise ValueError(f"Not a byte range: {value!r}")
    first, last, total = found.groups()
    return int(first), int(last), None if total == "*" else int(total)


def body_start(status: int, content_range: str | None, asked: int) -> int:
    """The offset an answer's body starts at: where a 206 says, which must be where we asked; 0 for a
    200 (a server that ignored the Range sends the whole file)."""
    if status != 206:
        return 0
    first, _, _ = parse_content_range(content_range or "")
    if first != asked:
        raise DownloadError(f"Asked for the bytes from {asked} on, the portal sent them from {first}.")
    return first


def body_total(response: httpx.Response, start: int) -> int | None:
    """The whole file's size, as the answer tells it."""
    if response.status_code == 206:
        return parse_content_range(response.headers.get("Content-Range", ""))[2]
    length = response.headers.get("Content-Length")
    return start + int(length) if length and length.isdigit() else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def is_whole(path: Path, expected: Expected | None) -> bool:
    return bool(
        expected
        and path.is_file()
        and path.stat().st_size == expected["bytes"]
        and sha256_of(path) == expected["sha256"]
    )


def download_file(
    client: OutputServer,
    url: str,
    target: Path,
    *,
    expected: Expected | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    retries: int = RETRIES,
) -> Path:
    """Download `url` to `target` through `<target>.part`, going on from what an earlier run left.
    `progress(done, total)` hears each block. A file already there and whole is left as it is."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if is_whole(target, expected):
        if progress:
            progress(expected["bytes"], expected["bytes"])
        return target
    partial = partial_path(target)
    size = expected["bytes"] if expected else None
    failures = 0
    while True:
        offset = resume_offset(partial.stat().st_size if partial.exists() else 0, size)
        if size is not None and 0 < offset == size:
            break
        try:
            _fetch(client, url, partial, offset, size, progress)
            break
        except (httpx.TransportError, APIError) as error:
            if isinstance(error, APIError) and error.status == 416:
                partial.unlink(missing_ok=True)  # a partial file that is not a start of this one
            elif isinstance(error, APIError) and error.status not in RETRIED:
                raise
            failures += 1
            wait_to_retry(error, failures, retries, f"Download of {target.name}")
    if expected and sha256_of(partial) != expected["sha256"]:
        partial.unlink()
        raise DownloadError(f"{target.name} arrived damaged (its SHA-256 is not the manifest's); download it again.")
    os.replace(partial, target)
    return target


def _fetch(
    client: OutputServer,
    url: str,
    partial: Path,
    offset: int,
    size: int | None,
    progress: Callable[[int, int | None], None] | None,
) -> None:
    """One answer's bytes, appended to the partial file from where the answer starts."""
    if offset:
        log.info("Resuming %s at byte %d.", partial.name.removesuffix(".part"), offset)
    response = client.open_output(url, offset)
    try:
        start = body_start(response.status_code, response.headers.get("Content-Range"), offset)
        total = body_total(response, start) or size
        with partial.open("r+b" if partial.exists() else "wb") as out:
            out.truncate(start)
            out.seek(start)
            done = start
            if progress:
                progress(done, total)
            for block in response.iter_bytes(BLOCK):
                out.write(block)
                done += len(block)
                if progress:
                    progress(done, total)
    finally:
        response.close()
