"""A zip of stored files written while it is sent, so a large output is never held whole."""

import zipfile
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import BinaryIO

CHUNK = 1024 * 1024


class _Sink:
    """A write-only file for zipfile; what it is given is handed out by `drain`."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        return None

    def drain(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


def stream_zip(files: list[tuple[str, Callable[[], BinaryIO]]], dated: datetime) -> Iterator[bytes]:
    """Yield a zip archive of (name, opener) pairs, each file opened only while it is written and dated
    `dated` (zip keeps no time zone: give it in UTC); Parquet is stored as it is, text is deflated."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w") as archive:
        for name, opener in files:
            method = zipfile.ZIP_STORED if name.endswith(".parquet") else zipfile.ZIP_DEFLATED
            info = zipfile.ZipInfo(name, date_time=dated.timetuple()[:6])
            info.compress_type = method
            with opener() as source, archive.open(info, "w", force_zip64=True) as target:
                while block := source.read(CHUNK):
                    target.write(block)
                    yield sink.drain()
            yield sink.drain()
    yield sink.drain()
