"""Reading a dataset: detect CSV or JSONL from its first bytes, then read records with their positions.

Every record carries its input position (1-based), the lines it spans and its byte range, so a
shard can be cut at a record boundary and re-read on its own. A blank line (nothing on it, or only
whitespace) is no record; a line holding a quoted field is one, even an empty one (`""`), as Python's
csv module reads it.

A CSV record the csv module cannot read is a record all the same, rejected with the reason, and the
read goes on: a stray quote rejects the record up to the line it is on, and the read goes on at the
next line, as the csv module does; a quote left open at the end of the data (or of a shard, or past
the field limit) rejects its record only up to the line where the quote opened, and the read goes
on at the line after that one. The header alone cannot be rejected: a header the csv module cannot
read fails staging.
"""

import codecs
import contextlib
import csv
import json
import re
from collections.abc import Iterator
from typing import BinaryIO

from jobs.processors import Record

SAMPLE_BYTES = 64 * 1024
PARQUET_MAGIC = b"PAR1"
# The csv module's messages when it stops inside a field: at the data's end, or at the field limit.
END_OF_DATA = "unexpected end of data"
FIELD_LIMIT = "field larger than field limit"
DELIMITERS = ",;\t|"
# A field may be large (a document to embed) but not unbounded: an unmatched quote stops here.
MAX_FIELD_CHARS = 16 * 1024 * 1024
csv.field_size_limit(MAX_FIELD_CHARS)

NEITHER = (
    "This file is neither CSV (a header row, then rows separated by commas, semicolons, tabs or pipes), "
    "JSONL (one JSON object per line), Parquet, nor a .zip or .tar of images."
)


class FormatError(ValueError):
    """The data cannot be read as the format it claims; the message is meant for the user."""


def detect(head: bytes, *, at_eof: bool, name: str = "") -> dict:
    """The layout of a dataset from its first bytes: format, and for CSV the delimiter and header."""
    if not head.strip():
        raise FormatError("The file is empty." if not head else "The file holds nothing but whitespace.")
    if head.startswith(PARQUET_MAGIC):
        return {"format": "parquet"}
    if head.startswith(b"PK\x03\x04"):
        return {"format": "images", "archive": "zip"}
    if head[257:262] == b"ustar":
        return {"format": "images", "archive": "tar"}
    if b"\x00" in head:
        raise FormatError("This is a binary file, not CSV or JSONL text.")
    text = _decode_head(head, at_eof)
    first = text.lstrip()[:1]
    if first == "[":
        raise FormatError("This is a JSON array; JSONL needs one JSON object per line.")
    if first == "{":
        return _detect_jsonl(text, at_eof)
    return _detect_csv(text, at_eof=at_eof, name=name)


def _decode_head(head: bytes, at_eof: bool) -> str:
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    try:
        return decoder.decode(head, final=at_eof)
    except UnicodeDecodeError as error:
        offset = error.start + (len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0)
        raise FormatError(
            f"This is not UTF-8 text (byte 0x{head[offset]:02x} at offset {offset}). Save it as UTF-8 CSV or JSONL."
        ) from None


def _detect_jsonl(text: str, at_eof: bool) -> dict:
    # Lines end at "\n" only, as when reading: JSON text may hold U+2028, U+2029 or U+0085 as they are.
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if not at_eof and number == len(lines):
            return {"format": "jsonl"}  # a first record longer than the sample: its lines are read later
        try:
            value = json.loads(line)
        except ValueError as error:
            raise FormatError(f"This looks like JSONL, but line {number} is not valid JSON: {error}.") from None
        if not isinstance(value, dict):
            raise FormatError(f"This looks like JSONL, but line {number} is not a JSON object.")
        return {"format": "jsonl"}
    raise FormatError(NEITHER)


def _detect_csv(text: str, *, at_eof: bool, name: str) -> dict:
    lines = text.splitlines(keepends=True)
    if not at_eof and len(lines) > 1:
        lines = lines[:-1]  # the sample may end mid-line
    best = None
    for delimiter in DELIMITERS:
        reader, rows = csv.reader(lines, delimiter=delimiter, strict=True), []
        with contextlib.suppress(csv.Error):  # the rows before it tell the delimiter; the read names its line
            for row in reader:
                if is_record(row, lines[reader.line_num - 1]):
                    rows.append(row)
        if not rows:
            continue
        width = len(rows[0])
        body = rows[1:-1] if not at_eof and len(rows) > 2 else rows[1:]
        consistent = sum(len(row) == width for row in body) / len(body) if body else 1.0
        score = (consistent, width)
        if width >= 2 and consistent >= 0.8 and (best is None or score > best[0]):
            best = (score, delimiter, rows[0])
    if best is None:
        if name.lower().endswith(".csv"):
            return {"format": "csv", "delimiter": ",", "quotechar": '"'}
        raise FormatError(NEITHER)
    return {"format": "csv", "delimiter": best[1], "quotechar": '"'}


def is_record(row: list[str], line: str) -> bool:
    """Whether a row the csv module read is a record, given the last line it was read from: a line
    with nothing but whitespace on it is none; a quoted field (`""` too) is one, and so is a row of
    two fields or more."""
    return len(row) > 1 or bool(line.strip())


class _Lines:
    """Binary lines decoded one by one, counting bytes and physical lines as they are handed out."""

    def __init__(self, stream: BinaryIO, start: int, end: int | None, first_line: int):
        self.stream = stream
        self.pos = start
        self.end = end
        self.line = first_line - 1
        self.origin = stream.tell() - start  # where offset 0 of the data is in the stream
        self.text = ""  # the last line handed out
        self.ended = False  # every line up to `end` (or the file's end) handed out

    def __iter__(self) -> Iterator[str]:
        # readline, not iteration: iterating a Django File rewinds it to the start first.
        for raw in iter(self.stream.readline, b""):
            if self.end is not None and self.pos >= self.end:
                break
            if self.pos == 0 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[3:]
                self.pos += 3
            self.pos += len(raw)
            self.line += 1
            try:
                self.text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise FormatError(f"Line {self.line} is not UTF-8 text (byte 0x{raw[error.start]:02x}).") from None
            yield self.text
        self.ended = True


def read_header(stream: BinaryIO, layout: dict) -> tuple[list[str], int, int]:
    """The CSV header's column names, the byte offset after it, and the number of lines it took."""
    lines = _Lines(stream, 0, None, 1)
    reader = csv.reader(iter(lines), delimiter=layout["delimiter"], quotechar=layout["quotechar"], strict=True)
    record_start, record_line = 0, 1
    while True:
        try:
            row = next(reader, None)
        except csv.Error as error:
            raise _csv_error(error, lines, record_start, record_line, layout) from None
        if row is None:
            raise FormatError("The CSV file has no header row.")
        if is_record(row, lines.text):
            return column_names(row), lines.pos, lines.line
        record_start, record_line = lines.pos, lines.line + 1


def _csv_error(error: csv.Error, lines: _Lines, start: int, line: int, layout: dict) -> FormatError:
    """What went wrong reading the record that starts at byte `start`, on `line`: an unclosed quote is
    named on the line where it opened, which may be past the record's first."""
    lines.stream.seek(lines.origin + start)
    text = lines.stream.read(lines.pos - start).decode("utf-8", "replace")
    opened = open_quote_line(text, layout["delimiter"], layout["quotechar"])
    if opened is None:
        return FormatError(f"Line {line}: {error}.")
    if lines.ended:
        return FormatError(f"Line {line + opened}: a quote opened here is never closed.")
    return FormatError(
        f"Line {line + opened}: a quote opened here is not closed within {csv.field_size_limit():,} characters."
    )


def open_quote_line(text: str, delimiter: str, quotechar: str) -> int | None:
    """The line, counted from 0, on which a quoted field still open at the end of `text` opened; None
    when none is. Quotes are read as the csv module reads them: a quote opens a field only at its
    start, and two in a quoted field stand for one."""
    separator = re.compile(f"[{re.escape(delimiter)}\n]")
    line, at = 0, 0
    while at < len(text):
        if text.startswith(quotechar, at):
            close = at + 1
            while (close := text.find(quotechar, close)) != -1 and text.startswith(quotechar, close + 1):
                close += 2
            if close == -1:
                return line
            line += text.count("\n", at, close)
            at = close + 1
        found = separator.search(text, at)
        if found is None:
            return None
        line += found.group() == "\n"
        at = found.end()
    return None


def column_names(header: list[str]) -> list[str]:
    """Header cells made into usable, distinct column names."""
    names: list[str] = []
    for number, cell in enumerate(header, start=1):
        name = cell.strip() or f"column_{number}"
        candidate, suffix = name, 2
        while candidate in names:
            candidate, suffix = f"{name}_{suffix}", suffix + 1
        names.append(candidate)
    return names


def iter_records(
    stream: BinaryIO,
    layout: dict,
    *,
    start: int,
    end: int | None = None,
    first_position: int = 1,
    first_line: int = 1,
) -> Iterator[Record]:
    """The records between byte offsets start and end; `stream` is positioned at start."""
    if layout["format"] == "jsonl":
        yield from _jsonl_records(stream, start, end, first_position, first_line)
    else:
        yield from _csv_records(stream, layout, start, end, first_position, first_line)


def _csv_records(stream, layout, start, end, position, first_line) -> Iterator[Record]:
    origin = stream.tell() - start  # where offset 0 of the data is in the stream
    resume: tuple[int, int, int] | None = (start, first_line, position)
    while resume is not None:
        stream.seek(origin + resume[0])
        resume = yield from _csv_run(stream, layout, end, *resume)


def _csv_run(stream, layout, end, start, first_line, position):
    """The records from byte `start` on; when one is rejected for a quote left open, the read stops
    there and returns where it goes on (byte, line, position), else None at the end."""
    lines = _Lines(stream, start, end, first_line)
    width = len(layout["columns"])
    reader = csv.reader(iter(lines), delimiter=layout["delimiter"], quotechar=layout["quotechar"], strict=True)
    record_start, record_line = start, first_line
    while True:
        try:
            row = next(reader, None)
        except csv.Error as error:
            reject = _unreadable(error, lines, record_start, record_line, position, layout)
            yield reject
            position += 1
            if reject.end != lines.pos:  # the lines read past the open quote's are read again
                return reject.end, reject.end_line + 1, position
        else:
            if row is None:
                return None
            if is_record(row, lines.text):
                error = None if len(row) == width else f"expected {width} fields, found {len(row)}"
                yield Record(position, record_line, row, error, record_start, lines.pos, lines.line)
                position += 1
        record_start, record_line = lines.pos, lines.line + 1


def _unreadable(error: csv.Error, lines: _Lines, start: int, line: int, position: int, layout: dict) -> Record:
    """The record the csv module could not read, from byte `start` on `line`, rejected with the reason:
    up to the line where a quote left open opened, else up to the line the read stopped on."""
    lines.stream.seek(lines.origin + start)
    raw = lines.stream.read(lines.pos - start)  # leaves the stream where the read stopped
    opened = open_quote_line(raw.decode("utf-8", "replace"), layout["delimiter"], layout["quotechar"])
    message = str(error)
    at_end, at_limit = message == END_OF_DATA, message.startswith(FIELD_LIMIT)
    if opened is None or not (at_end or at_limit):
        return Record(position, line, None, _reason(message), start, lines.pos, lines.line)
    if at_end:
        reason = f"a quote opened on line {line + opened} is never closed"
    else:
        reason = f"a quote opened on line {line + opened} is not closed within {csv.field_size_limit():,} characters"
    return Record(position, line, None, reason, start, start + _past_line(raw, opened), line + opened)


def _past_line(raw: bytes, index: int) -> int:
    """The offset just past line `index` (counted from 0) of `raw`: past its newline, else the end."""
    at = -1
    for _ in range(index + 1):
        at = raw.find(b"\n", at + 1)
        if at == -1:
            return len(raw)
    return at + 1


def _reason(message: str) -> str:
    """Why a record the csv module could not read is rejected, from the csv module's message."""
    if message.endswith(" expected after '\"'"):
        return f"a closing quote is followed by more of the field ({message})"
    if message.startswith("new-line character seen in unquoted field"):
        return "a carriage return inside an unquoted field"
    return message


def _jsonl_records(stream, start, end, position, first_line) -> Iterator[Record]:
    pos, line = start, first_line - 1
    for raw in iter(stream.readline, b""):
        if end is not None and pos >= end:
            return
        record_start = pos
        pos += len(raw)
        line += 1
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError as error:
            yield Record(position, line, None, f"not valid JSON: {error}", record_start, pos, line)
        else:
            if isinstance(value, dict):
                yield Record(position, line, value, None, record_start, pos, line)
            else:
                yield Record(position, line, None, "not a JSON object", record_start, pos, line)
        position += 1
