"""Staging's read of a CSV file at pyarrow's speed: count the records, cut shards, and let the
processor's scanner see every column, without a Python step per record.

The file is read in blocks that end at a record boundary. A boundary is guessed as a newline with an
even number of quotes before it in the block, which is right for CSV whose quotes open and close
fields; each block is then parsed by pyarrow. Whatever this cannot vouch for — bytes that are not
UTF-8, a carriage return alone, a quote in the middle of a field, a parse error, a one-column file —
raises `Unsure`, and staging reads the file again the exact, slower way, which also words the error.
"""

import io
import re
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, NamedTuple

import pyarrow as pa
import pyarrow.csv as pacsv

MIN_BLOCK = 64 * 1024
MAX_BLOCK = 4 * 1024 * 1024
BLOCKS_PER_FILE = 64  # small files still get enough cut points for their shards
PARSERS = 2  # blocks parsed at once while the one before is counted (pyarrow lets go of the GIL)
TRUE_VALUES = ["true", "True", "TRUE", "yes", "Yes", "YES"]
FALSE_VALUES = ["false", "False", "FALSE", "no", "No", "NO"]


class Unsure(Exception):
    """The fast read cannot vouch for this file; read it the exact way."""


def block_size(size: int) -> int:
    return max(MIN_BLOCK, min(MAX_BLOCK, size // BLOCKS_PER_FILE))


def _suspicious_quote(delimiter: bytes) -> re.Pattern:
    """A quote with a character other than a delimiter, a line end or a quote on both sides: literal
    in an unquoted field, or an error in a quoted one. Either way, quote parity cannot be trusted."""
    other = b"[^" + re.escape(delimiter) + b'\\r\\n"]'
    # The quote first, so the search jumps from quote to quote; the lookbehind then sees the character before it.
    return re.compile(b'"(?=' + other + b")(?<=" + other + b'")')


def _boundary(data: bytes, start: int, target: int) -> int:
    """The end (just past a newline) of the first record ending at or after `target`, or -1."""
    quotes, counted = 0, start
    newline = data.find(b"\n", target)
    while newline != -1:
        quotes += data.count(b'"', counted, newline)
        counted = newline
        if quotes % 2 == 0:
            return newline + 1
        newline = data.find(b"\n", newline + 1)
    return -1


def _check(block: bytes, suspicious: re.Pattern, last: bool) -> None:
    try:
        block.decode("utf-8")
    except UnicodeDecodeError:
        raise Unsure from None
    if (b"\r" in block and block.count(b"\r") != block.count(b"\r\n")) or suspicious.search(block):
        raise Unsure
    if last and block.count(b'"') % 2:
        raise Unsure  # an unmatched quote (other blocks end where the count is even): the exact read says where


def _parse(block: bytes, columns: list[str], delimiter: str) -> tuple[pa.Table, int]:
    """The block's rows as a table, and how many rows it holds that have the wrong number of fields
    (records all the same: the pass rejects them); blank and whitespace-only lines are no records."""
    malformed = 0

    def invalid(row) -> str:
        nonlocal malformed
        if row.text.strip():
            malformed += 1
        return "skip"

    try:
        table = pacsv.read_csv(
            io.BytesIO(block),
            read_options=pacsv.ReadOptions(column_names=columns, use_threads=True),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True, invalid_row_handler=invalid),
            convert_options=pacsv.ConvertOptions(
                null_values=[""], true_values=TRUE_VALUES, false_values=FALSE_VALUES, strings_can_be_null=False
            ),
        )
    except (pa.ArrowException, ValueError):
        raise Unsure from None
    return table, malformed


def read(
    stream: BinaryIO,
    layout: dict,
    data_offset: int,
    header_lines: int,
    size: int,
    add_table: Callable[[pa.Table], None] | None,
    advance: Callable[[int], None],
) -> tuple[int, list[tuple[int, int, int]]]:
    """Read the records after the header: their count and the cut points (records, end byte, end line)."""
    columns = layout["columns"]
    if len(columns) < 2:
        raise Unsure  # with one column, telling a blank line from a record takes Python's rules
    if size < BLOCKS_PER_FILE * MIN_BLOCK:
        raise Unsure  # too small for enough blocks to cut shards from; the exact read is quick here
    delimiter = layout["delimiter"]
    suspicious = _suspicious_quote(delimiter.encode())
    target = block_size(size)
    stream.seek(data_offset)
    records, lines, position, cuts = 0, header_lines, data_offset, []
    parsing: deque[tuple[Future, int, int]] = deque()

    def take_one() -> None:
        """The oldest block parsed: count it in order (pyarrow parses the next ones meanwhile)."""
        nonlocal records, lines, position
        future, length, newlines = parsing.popleft()
        table, malformed = future.result()
        if add_table is not None and table.num_rows:
            add_table(table)
        records += table.num_rows + malformed
        lines += newlines
        position += length
        cuts.append((records, position, lines))
        advance(position)

    with ThreadPoolExecutor(max_workers=PARSERS, thread_name_prefix="e31-csv") as parsers:
        for block in _blocks(stream, target):
            _check(block.data, suspicious, last=block.last)
            newlines = block.data.count(b"\n") + (0 if block.data.endswith(b"\n") else 1)
            parsing.append((parsers.submit(_parse, block.data, columns, delimiter), len(block.data), newlines))
            if len(parsing) > PARSERS:
                take_one()
        while parsing:
            take_one()
    return records, cuts


class _Block(NamedTuple):
    data: bytes
    last: bool  # the rest of the file, taken whole: it may end inside an unmatched quote


def _blocks(stream: BinaryIO, target: int) -> Iterator[_Block]:
    """The file in blocks of about `target` bytes, each ending where a record ends."""
    pending, at_end, wanted = b"", False, 2 * target
    while True:
        while not at_end and len(pending) < wanted:
            more = stream.read(MAX_BLOCK)
            at_end = not more
            pending += more
        if not pending:
            return
        end = _boundary(pending, 0, min(target, len(pending)))
        if end == -1 and not at_end:
            wanted = len(pending) + MAX_BLOCK  # a record longer than a block: read on to its end
            continue
        wanted = 2 * target
        if end == -1:
            yield _Block(pending, True)
            return
        yield _Block(pending[:end], False)
        pending = pending[end:]
