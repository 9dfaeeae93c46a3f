"""A file streamed with HTTP Range (RFC 9110), for resumable downloads: Django's FileResponse sends the whole
file only. One range is answered 206 with its Content-Range; a range that starts past the end, 416. Several
ranges, a range of another unit, a malformed one, or an If-Range that names another version of the file are
answered with the whole file (200), as the RFC allows."""

import mimetypes
import re
from collections.abc import Iterator
from typing import BinaryIO

from django.http import HttpResponse, JsonResponse, StreamingHttpResponse

BLOCK = 256 * 1024
SPEC = re.compile(r"(\d*)-(\d*)")


class Unsatisfiable(Exception):
    """No byte of the range is in the file."""


def requested_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one range asked for, as (first, last) byte positions inclusive; None for the whole file."""
    if not header:
        return None
    unit, _, specs = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in specs:
        return None
    match = SPEC.fullmatch(specs.strip())
    if not match or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if not first:  # the last `last` bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise Unsatisfiable
        return max(0, size - suffix), size - 1
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        raise Unsatisfiable
    return start, min(int(last), size - 1) if last else size - 1


def _read(file: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    try:
        file.seek(start)
        while length > 0:
            block = file.read(min(BLOCK, length))
            if not block:
                return
            length -= len(block)
            yield block
    finally:
        file.close()


def ranged_file_response(request, file: BinaryIO, size: int, filename: str, etag: str) -> HttpResponse:
    """The file, or the one range of it the request asks for; `etag` names this version of the file."""
    if_range = request.headers.get("If-Range")
    header = request.headers.get("Range") if if_range in (None, etag) else None
    try:
        asked = requested_range(header, size)
    except Unsatisfiable:
        file.close()
        message = f"The range {header!r} is not in the file, which is {size} bytes long."
        response = JsonResponse({"error": {"code": "range_not_satisfiable", "message": message}}, status=416)
        response["Content-Range"] = f"bytes */{size}"
        return response
    first, last = asked or (0, size - 1)
    content_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    response = StreamingHttpResponse(
        _read(file, first, last - first + 1), status=206 if asked else 200, content_type=content_type
    )
    response["Content-Length"] = str(max(0, last - first + 1))
    if asked:
        response["Content-Range"] = f"bytes {first}-{last}/{size}"
    response["Accept-Ranges"] = "bytes"
    response["ETag"] = etag
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
