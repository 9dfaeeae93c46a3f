"""Compressed datasets: gzip (one member or several), zstd and bzip2 (one stream or several), known by
their first bytes, never by their name, and decompressed as they are read, so that the staged copy is
the data uncompressed and describing, shards, ranged reads and every record's position see plain data.

The bytes as sent are hashed and counted as they are read: a partner checks a .gz with sha256sum. The
uncompressed bytes are held, as they come out and before they are handed on, to the dataset limit and
to E31_MAX_COMPRESSION_RATIO times the bytes as sent, so a compression bomb is refused before it fills
the disk. A stream that breaks (cut short, corrupt, followed by what is not another member) raises
CompressedError: one sentence naming the source and the byte, as sent, where it broke.

zlib, bz2 and zstandard decode. zstd is framed here (frame and block headers only), because zstandard's
decompressobj has no output limit: given one block at a time, it gives at most a block's 128 KiB.
"""

import bz2
import contextlib
import hashlib
import io
import os
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

import zstandard
from django.conf import settings

from jobs.staging.formats import FormatError
from portal import units

GZIP, ZSTD, BZIP2 = "gzip", "zstd", "bzip2"
SNIFF_BYTES = 4
GZIP_MAGIC = b"\x1f\x8b"
BZIP2_MAGIC = b"BZh"
ZSTD_MAGIC = 0xFD2FB528
ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)  # a frame of metadata a decoder skips
ZSTD_CONTENT_SIZE_BYTES = (0, 2, 4, 8)  # by the frame header's two top bits
ZSTD_DICTIONARY_BYTES = (0, 1, 2, 4)  # by its two bottom bits
PLAIN_NAME_DROPS = ("gz", "gzip", "zst", "zstd", "bz2")  # the suffixes plain_name takes off
READ = 1024 * 1024  # what is asked of the source at a time
PIECE = 64 * 1024  # the most bytes as sent a gzip or bzip2 decoder is given at once: a break is named within it
OUT = 1024 * 1024  # the most uncompressed bytes one call of a decoder hands out
# Up to this many uncompressed bytes, data may expand at any ratio: a small file of repeated values is no bomb.
RATIO_ALLOWANCE = 16 * 1024 * 1024


class CompressedError(FormatError):
    """The compressed data cannot be read to its end, or expands past a limit; the message is for the user."""


def sniff(head: bytes) -> str | None:
    """The compression the first bytes of a dataset show (at least SNIFF_BYTES of them): gzip, zstd,
    bzip2, or None for data that is not compressed."""
    if head.startswith(GZIP_MAGIC):
        return GZIP
    if len(head) >= 4 and _zstd_frame(int.from_bytes(head[:4], "little")):
        return ZSTD
    if head.startswith(BZIP2_MAGIC) and head[3:4].isdigit() and head[3:4] != b"0":
        return BZIP2
    return None


def _zstd_frame(magic: int) -> bool:
    return magic == ZSTD_MAGIC or magic in ZSTD_SKIPPABLE


def plain_name(name: str) -> str:
    """A file's name without a compression's suffix (customers.csv.gz: customers.csv), for its uncompressed
    copy. What the data is, compressed or not, is known from its bytes, never from this."""
    stem, dot, suffix = name.rpartition(".")
    return stem if dot and stem and suffix.lower() in PLAIN_NAME_DROPS else name


def peek(raw: BinaryIO, size: int = SNIFF_BYTES) -> bytes | None:
    """The first `size` bytes of `raw`, left to be read (fewer only when it holds fewer); None when it can
    neither peek (a download, a buffered file) nor seek."""
    if hasattr(raw, "peek"):
        return raw.peek(size)[:size]
    if getattr(raw, "seekable", lambda: False)():
        position = raw.tell()
        head = raw.read(size)
        raw.seek(position)
        return head
    return None


def open_decompressed(raw: BinaryIO, what: str) -> "Decompressed | Plain":
    """`raw` as a readable stream of its uncompressed bytes, whatever its compression (`compression`, None
    for data that is not compressed, handed on as it is read). `what` names the source in messages."""
    head = peek(raw)
    taken = b""
    if head is None:
        head = taken = _read_up_to(raw, SNIFF_BYTES)
    compression = sniff(head)
    if compression is None:
        return Plain(raw, taken)
    return Decompressed(raw, what, compression, taken)


def _read_up_to(raw: BinaryIO, size: int) -> bytes:
    parts: list[bytes] = []
    while size and (part := raw.read(size)):
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


class _Reads:
    """read, readinto and read1 with no size, from a read1 that hands out up to `size` bytes."""

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1) -> bytes:
        raise NotImplementedError

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read1(READ), b""))
        parts: list[bytes] = []
        while size and (part := self.read1(size)):
            parts.append(part)
            size -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readinto(self, buffer) -> int:
        data = self.read1(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)


class Plain(_Reads):
    """Data that is not compressed, handed on as the source gives it (no copy), hashed and counted."""

    compression = None

    def __init__(self, raw: BinaryIO, head: bytes = b""):
        self.raw, self.head = raw, head
        self.read_raw = getattr(raw, "read1", raw.read)
        self.sha256 = hashlib.sha256()
        self.raw_bytes = 0
        self.phase = getattr(raw, "phase", "copying")

    def read1(self, size: int = -1) -> bytes:
        size = READ if size is None or size < 0 else size
        if self.head:
            data, self.head = self.head[:size], self.head[size:]
        else:
            data = self.read_raw(size)
        self.sha256.update(data)
        self.raw_bytes += len(data)
        return data

    def raw_sha256(self) -> str:
        return self.sha256.hexdigest()


class _Sent:
    """The bytes as sent, read from the source as a decoder asks for them, hashed and counted as they
    are read, and handed out from `offset`, their position in the bytes as sent."""

    def __init__(self, raw: BinaryIO, head: bytes):
        self.read_raw = getattr(raw, "read1", raw.read)
        self.sha256 = hashlib.sha256()
        self.received = 0
        self.buffer, self.start = memoryview(b""), 0
        self.offset = 0
        self.ended = False
        if head:
            self._received(head)

    def _received(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        self.received += len(chunk)
        left = self.buffer[self.start :]
        self.buffer = memoryview(bytes(left) + chunk) if left else memoryview(chunk)
        self.start = 0

    def _more(self) -> bool:
        if not self.ended:
            chunk = self.read_raw(READ)
            if chunk:
                self._received(chunk)
                return True
            self.ended = True
        return False

    def window(self, size: int) -> memoryview:
        """Up to `size` bytes from the offset on, left there: empty only at the end."""
        if self.start == len(self.buffer):
            self._more()
        return self.buffer[self.start : self.start + size]

    def peek(self, size: int) -> bytes:
        """`size` bytes from the offset on, left there (fewer only at the end)."""
        while len(self.buffer) - self.start < size and self._more():
            pass
        return bytes(self.buffer[self.start : self.start + size])

    def advance(self, count: int) -> None:
        self.start += count
        self.offset += count

    def take(self, size: int) -> memoryview:
        """`size` bytes from the offset on, taken (fewer only at the end)."""
        parts: list[memoryview] = []
        while size and (part := self.window(size)):
            parts.append(part)
            self.advance(len(part))
            size -= len(part)
        return parts[0] if len(parts) == 1 else memoryview(b"".join(parts))

    def skip(self, count: int) -> int:
        """Pass over `count` bytes (fewer only at the end), a window at a time: how many."""
        skipped = 0
        while skipped < count and (part := self.window(count - skipped)):
            self.advance(len(part))
            skipped += len(part)
        return skipped

    def give_back(self, data: bytes) -> None:
        """Bytes a decoder took past the end of its stream: the next stream's, or garbage."""
        if data:
            self.buffer = memoryview(bytes(data) + bytes(self.buffer[self.start :]))
            self.start = 0
            self.offset -= len(data)


class Decompressed(_Reads):
    """The uncompressed bytes of a compressed source, decoded as they are read (see the module's docstring)."""

    def __init__(self, raw: BinaryIO, what: str, compression: str, head: bytes = b""):
        self.what, self.compression = what, compression
        self.raw = raw
        self.sent = _Sent(raw, head)
        self.phase = getattr(raw, "phase", "copying")
        self.plain_bytes = 0
        self.chunks = DECODERS[compression](self.sent, _Breaks(what, compression))
        self.rest = memoryview(b"")

    @property
    def raw_bytes(self) -> int:
        return self.sent.received

    @property
    def sent_size(self) -> int | None:
        """The bytes as sent, where the source said how many (a download's length, a file's size): what
        staging's progress counts against, since the uncompressed size is known only at the end."""
        size = getattr(self.raw, "size", None)
        if size is None:
            with contextlib.suppress(AttributeError, OSError, io.UnsupportedOperation):
                size = os.fstat(self.raw.fileno()).st_size
        return size

    def raw_sha256(self) -> str:
        return self.sent.sha256.hexdigest()

    def read1(self, size: int = -1) -> bytes:
        if not self.rest:
            chunk = next(self.chunks, None)
            if chunk is None:
                return b""
            self._held_to_limits(len(chunk))
            self.rest = memoryview(chunk)
        taken = self.rest if size is None or size < 0 else self.rest[:size]
        self.rest = self.rest[len(taken) :]
        return taken.obj if len(taken) == len(taken.obj) else bytes(taken)

    def _held_to_limits(self, count: int) -> None:
        self.plain_bytes += count
        limit, ratio, sent = settings.E31_MAX_DATASET_BYTES, settings.E31_MAX_COMPRESSION_RATIO, self.sent.offset
        if self.plain_bytes > limit:
            raise CompressedError(
                f"{self.what}, uncompressed, is more than the {limit:,}-byte ({units.limit(limit)}) limit for a "
                f"dataset: refused at byte {sent:,} of the {self.compression} data as sent."
            )
        if self.plain_bytes > ratio * sent + RATIO_ALLOWANCE:
            raise CompressedError(
                f"{self.what} expands more than {ratio:,} times ({self.plain_bytes:,} bytes from the first "
                f"{sent:,} as sent): refused as a compression bomb before it filled the disk."
            )


class _Breaks:
    """The sentences for a compressed stream that breaks, each naming the source and the byte as sent."""

    UNITS = {GZIP: "member", ZSTD: "frame", BZIP2: "stream"}

    def __init__(self, what: str, compression: str):
        self.what, self.compression, self.unit = what, compression, self.UNITS[compression]

    def cut_short(self, start: int, end: int) -> CompressedError:
        return CompressedError(
            f"{self.what}: the {self.compression} data ends at byte {end:,}, in the middle of the {self.unit} "
            f"that starts at byte {start:,}: it was cut short."
        )

    def corrupt(self, start: int, end: int, error: Exception) -> CompressedError:
        reason = str(error).rsplit(": ", 1)[-1].rstrip(".")
        return CompressedError(
            f"{self.what}: the {self.compression} data is corrupt ({reason}): the decoder found it at bytes "
            f"{start:,} to {end:,} as sent."
        )

    def garbage(self, at: int) -> CompressedError:
        return CompressedError(
            f"{self.what}: byte {at:,} onwards is not {self.compression} data: something other than another "
            f"{self.unit} follows the last complete one."
        )


def _another(sent: _Sent, magic: bytes, breaks: _Breaks) -> bool:
    """Whether another member (stream) follows the one that just ended; anything else is garbage."""
    following = sent.peek(len(magic))
    if not following:
        return False
    if following != magic:
        raise breaks.garbage(sent.offset)
    return True


def _skip_zeros(sent: _Sent) -> None:
    """Zero bytes after a gzip member are padding, as gzip itself and Python's gzip read them."""
    while (window := sent.window(PIECE)) and not window[0]:
        sent.advance(len(window) - len(bytes(window).lstrip(b"\0")))


def _gzip(sent: _Sent, breaks: _Breaks) -> Iterator[bytes]:
    while True:
        start = sent.offset
        member = zlib.decompressobj(zlib.MAX_WBITS | 16)
        while not member.eof:
            piece = sent.window(PIECE)
            try:
                out = member.decompress(piece, OUT)
            except zlib.error as error:
                raise breaks.corrupt(sent.offset, sent.offset + len(piece), error) from None
            sent.advance(len(piece) - len(member.unconsumed_tail) - len(member.unused_data))
            if out:
                yield out
            elif not piece and not member.eof:
                raise breaks.cut_short(start, sent.offset)
        _skip_zeros(sent)
        if not _another(sent, GZIP_MAGIC, breaks):
            return


def _bzip2(sent: _Sent, breaks: _Breaks) -> Iterator[bytes]:
    while True:
        start = sent.offset
        stream = bz2.BZ2Decompressor()
        while not stream.eof:
            piece = sent.window(PIECE) if stream.needs_input else memoryview(b"")
            sent.advance(len(piece))
            try:
                out = stream.decompress(piece, OUT)
            except OSError as error:
                raise breaks.corrupt(sent.offset - len(piece), sent.offset, error) from None
            if out:
                yield out
            elif not piece and stream.needs_input and not stream.eof:
                raise breaks.cut_short(start, sent.offset)
        sent.give_back(stream.unused_data)
        if not _another(sent, BZIP2_MAGIC, breaks):
            return


def _zstd(sent: _Sent, breaks: _Breaks) -> Iterator[bytes]:
    decompressor = zstandard.ZstdDecompressor()
    while head := sent.peek(4):
        start = sent.offset
        magic = int.from_bytes(head, "little")
        if len(head) < 4 or not _zstd_frame(magic):
            raise breaks.garbage(start)
        need = _needing(sent, breaks, start)
        need(4)
        if magic in ZSTD_SKIPPABLE:
            size = int.from_bytes(need(4), "little")
            if sent.skip(size) < size:  # passed over, not held: it may say it is 4 GiB long
                raise breaks.cut_short(start, sent.offset)
            continue
        frame = decompressor.decompressobj()
        decode = _decoding(frame, sent, breaks)
        descriptor = need(1)[0]
        single_segment = descriptor >> 5 & 1
        header_bytes = (
            (not single_segment)
            + ZSTD_DICTIONARY_BYTES[descriptor & 3]
            + (ZSTD_CONTENT_SIZE_BYTES[descriptor >> 6] or single_segment)
        )
        decode(head + bytes([descriptor]) + bytes(need(header_bytes)), start)
        last = False
        while not last:
            at = sent.offset
            header = need(3)
            block = int.from_bytes(header, "little")
            last = bool(block & 1)
            decode(header, at)
            if out := decode(need(1 if block >> 1 & 3 == 1 else block >> 3), at):  # a run-length block: one byte
                yield out
        if descriptor & 4:  # the frame's checksum of its content
            decode(need(4), sent.offset - 4)
        if not frame.eof:
            raise breaks.corrupt(start, sent.offset, ValueError("the frame does not end where its last block does"))


def _needing(sent: _Sent, breaks: _Breaks, start: int) -> Callable[[int], memoryview]:
    """Takes exactly `size` bytes of the frame that starts at `start`; fewer is a frame cut short."""

    def need(size: int) -> memoryview:
        taken = sent.take(size)
        if len(taken) < size:
            raise breaks.cut_short(start, sent.offset)
        return taken

    return need


def _decoding(frame, sent: _Sent, breaks: _Breaks) -> Callable[[bytes, int], bytes]:
    def decode(data, at: int) -> bytes:
        try:
            return frame.decompress(data)
        except zstandard.ZstdError as error:
            raise breaks.corrupt(at, sent.offset, error) from None

    return decode


DECODERS: dict[str, Callable[[_Sent, _Breaks], Iterator[bytes]]] = {GZIP: _gzip, ZSTD: _zstd, BZIP2: _bzip2}
