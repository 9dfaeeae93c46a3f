"""Staging's read of a CSV file at close to the disk's speed: count the records and cut shards
without parsing them, and let the processor's scanner see a sample of them (or every one, when it
asks for that).

A newline outside a quoted field ends a record. The scan finds the record ends a block at a time, in
one compiled pass over its bytes (scankernel) that reads quotes as Python's csv module does, and
checks on the way what it depends on. Whatever it cannot vouch for — bytes that are not UTF-8, a
carriage return alone, a record longer than the csv module's field limit, a one-column file — raises
`Unsure`, and staging reads the file again the exact, slower way, which also words the error. A line
no delimiter splits is a record unless it is blank (whitespace only); a quoted field alone on a line,
even an empty one, is a record. A record the exact read rejects unread is counted as it counts it: a
stray quote's to the end of its line, a quote left open at the end of the data's up to the line where
it opened, the scan going on from the next line. Staging runs the scan on a thread beside the copy
(ScanAlong), so the data is read once.

A scanner that may work from a sample (clean-table's type count) sees about TYPE_SAMPLE_BYTES of
records from across the file, parsed by pyarrow: kept by the scan beside the copy as it passes them
(_Sampler), else read from the staged copy. One that needs every record (column-stats' ranges) sees
every record parsed, a piece at a time. Neither sees a record the exact read rejects unread: each
piece is parsed with those cut out.
"""

import bisect
import csv
import io
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from jobs.staging.formats import SAMPLE_BYTES, FormatError, detect, is_record, open_quote_line, read_header
from jobs.staging.scankernel import NEWLINE, ONE_FIELD, UNREADABLE, scan_block

log = logging.getLogger(__name__)

MIN_BLOCK = 64 * 1024
MAX_BLOCK = 4 * 1024 * 1024  # the most parsed at once when a scanner needs every record
BLOCKS_PER_FILE = 64  # small files still get enough cut points for their shards
PARSERS = 2  # pieces parsed at once
SCAN_BLOCK = 1024 * 1024
TYPE_SAMPLE_BYTES = 16 * 1024 * 1024  # what a sampling scanner sees, in SAMPLE_PIECES pieces across the file
SAMPLE_PIECES = 32
RETURN = b"\r"[0]
TRUE_VALUES = ["true", "True", "TRUE", "yes", "Yes", "YES"]
FALSE_VALUES = ["false", "False", "FALSE", "no", "No", "NO"]


class Unsure(Exception):
    """The fast read cannot vouch for this file; read it the exact way."""


def _parse(block: bytes, columns: list[str], delimiter: str) -> tuple[pa.Table, int]:
    """The block's rows as a table, and how many rows it holds that have the wrong number of fields
    (records all the same: the pass rejects them, `""` alone on a line too); blank and whitespace-only
    lines are no records."""
    if not block:
        return pa.table({}), 0  # a piece of nothing but records the exact read rejects
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
    *,
    every_record: bool = False,
    grain: int = 250,
    max_cuts: int = 10_000,
    scanned: "Scanned | None" = None,
) -> tuple[int, list[tuple[int, int, int]], int]:
    """Read the records after the header: their count, the cut points (records, end byte, end line)
    and how many records `add_table` saw: a sample of them, or every one with `every_record`.
    `scanned` is what a ScanAlong found while the file was copied, which spares the scan here."""
    if len(layout["columns"]) < 2:
        raise Unsure  # with one column, every line is one field: the exact read decides each
    if size < BLOCKS_PER_FILE * MIN_BLOCK:
        raise Unsure  # too small for enough blocks to cut shards from; the exact read is quick here
    kept = None
    if scanned is not None and scanned.matches(layout, data_offset, header_lines):
        records, cuts, rejected, kept = scanned.records, scanned.cuts, scanned.rejected, scanned.sample
    else:
        scan = _Scan(layout["delimiter"], data_offset, header_lines, grain, max_cuts)
        records, cuts = scan.run(stream, advance)
        rejected = scan.rejected
    if add_table is None:
        return records, cuts, 0
    if every_record or kept is None:
        bounds = [data_offset] + [end for _, end, _ in cuts]
        kept = _read_pieces(stream, _every_piece(bounds) if every_record else _sample(bounds))
    parsed = _parse_pieces(_without(kept, rejected), layout, add_table, advance)
    return records, cuts, records if every_record else parsed


class _Scan:
    """Counts records and marks cut points every `grain` records (and at the end of each block),
    reading the file block by block without parsing it. The records the exact read rejects are
    counted as it counts them, and their byte ranges kept (`rejected`), so no scanner sees them."""

    def __init__(
        self,
        delimiter: str,
        data_offset: int,
        header_lines: int,
        grain: int,
        max_cuts: int,
        sampler: "_Sampler | None" = None,
    ):
        if len(delimiter.encode()) != 1:
            raise Unsure  # the scan reads one-byte delimiters
        self.delimiter = delimiter.encode()
        self.sampler = sampler  # keeps the type sample's pieces as they pass
        self.position, self.lines, self.records = data_offset, header_lines, 0
        self.grain, self.max_cuts = grain, max_cuts
        self.field_limit = csv.field_size_limit()
        self.cuts: list[tuple[int, int, int]] = []
        self.rejected: list[tuple[int, int]] = []  # the byte ranges of the records the exact read rejects
        self.ends = self.ends_line = np.empty(0, np.int64)  # scan_block's output, kept from block to block
        self.kinds = np.empty(0, np.uint8)

    def run(self, stream: BinaryIO, advance: Callable[[int], None]) -> tuple[int, list[tuple[int, int, int]]]:
        """Read into one buffer, the unfinished record after a block moved to its front (fresh
        memory for every block costs page faults)."""
        stream.seek(self.position)
        buffer, pending = bytearray(2 * SCAN_BLOCK), 0
        while True:
            if len(buffer) - pending < SCAN_BLOCK:
                buffer.extend(bytes(len(buffer)))  # a record longer than a block: room to read on
            window = memoryview(buffer)[pending : pending + SCAN_BLOCK]
            more = stream.readinto(window) or 0
            window.release()
            filled = pending + more
            if not filled:
                break
            used = self._block(buffer, filled, last=not more)
            buffer[: filled - used] = buffer[used:filled]
            pending = filled - used
            if used:
                advance(self.position)
        if not self.cuts or self.cuts[-1][1] != self.position:
            self.cuts.append((self.records, self.position, self.lines))
        if self.sampler:
            self.sampler.finish(self.position)
        return self.records, self.cuts

    def _block(self, data: bytearray, filled: int, last: bool) -> int:
        """Count the records of `data[:filled]` up to its last record end (all of it when `last`);
        return the bytes taken. `data` starts where a record starts."""
        if len(self.ends) < filled:
            self.ends, self.ends_line = np.empty(len(data), np.int64), np.empty(len(data), np.int64)
            self.kinds = np.empty(len(data), np.uint8)
        view = np.frombuffer(data, np.uint8, filled)
        count, newlines, quoted, doubt = scan_block(
            view, filled, last, self.delimiter[0], self.ends, self.ends_line, self.kinds
        )
        ends, ends_line, kinds = self.ends[:count], self.ends_line[:count], self.kinds[:count]
        if filled > self.field_limit and _longest(ends, filled) > self.field_limit:
            raise Unsure  # a field may pass the csv module's limit: the exact read says where
        if last and quoted:
            if not count:
                return self._left_open(data, filled, doubt)
            last = False  # the records before the one left open; that one is taken alone next
        if last:
            length = filled
        elif not count:
            return 0  # a record longer than what is read so far: read on to its end
        else:
            length, newlines = int(ends[-1]) + 1, int(ends_line[-1])
        if doubt < length:
            raise Unsure
        if self.sampler:
            self.sampler.take(data, self.position, length, ends)
        self._count(view, data, ends, ends_line, kinds)
        tail = length - (int(ends[-1]) + 1 if len(ends) else 0)
        if tail:
            self._count_last(data[length - tail : length], self.position + length - tail)
        self.lines += newlines + (1 if tail else 0)
        self.position += length
        self._cut()
        return length

    def _count(self, view: np.ndarray, data: bytearray, ends: np.ndarray, ends_line: np.ndarray, kinds: np.ndarray):
        """Count the records that end at `ends`, marking a cut point every `grain` records, and keep
        where each unreadable one lies."""
        count = len(ends)
        record = kinds != ONE_FIELD
        if record.all():  # every line split into fields, as in nearly every block: each is a record
            at = np.arange((-self.records - 1) % self.grain, count, self.grain)
            numbers, found = self.records + at + 1, count
        else:
            record = self._one_field_lines_decided(view, data, ends, record)
            counted = self.records + np.cumsum(record)
            at = np.flatnonzero(record & (counted % self.grain == 0))
            numbers, found = counted[at], int(np.count_nonzero(record))
        self.cuts.extend(
            zip(
                numbers.tolist(),
                (self.position + ends[at] + 1).tolist(),
                (self.lines + ends_line[at]).tolist(),
                strict=True,
            )
        )
        self.records += found
        unreadable = np.flatnonzero(kinds == UNREADABLE)
        if len(unreadable):
            starts = self.position + np.where(unreadable > 0, ends[unreadable - 1] + 1, 0)
            self.rejected += zip(starts.tolist(), (self.position + ends[unreadable] + 1).tolist(), strict=True)

    def _count_last(self, line: bytearray, start: int) -> None:
        """Count the data's last record, `line` from byte `start`, which no newline ends."""
        self.records += self._one_field_record(line)
        if self._unreadable(line):
            self.rejected.append((start, start + len(line)))

    def _left_open(self, data: bytearray, filled: int, doubt: int) -> int:
        """Take the record the data ends in, `data[:filled]`, left open by a quote, as the exact read
        takes it: rejected up to the end of the line where that quote opened. Return the bytes taken."""
        if doubt < filled:
            raise Unsure
        opened = open_quote_line(bytes(data[:filled]).decode(), self.delimiter.decode(), '"')
        if opened is None:
            raise Unsure  # the exact read would not find the quote left open: let it decide
        breaks = np.flatnonzero(np.frombuffer(data, np.uint8, filled) == NEWLINE)
        length = int(breaks[opened]) + 1 if opened < len(breaks) else filled
        if self.sampler:
            self.sampler.take(data, self.position, length, breaks[opened : opened + 1])
        self.rejected.append((self.position, self.position + length))
        self.records += 1
        self.lines += opened + 1
        self.position += length
        self._cut()
        return length

    def _cut(self) -> None:
        """A cut point where the scan has got to, and no more of them than `max_cuts`."""
        if not self.cuts or self.cuts[-1][1] != self.position:
            self.cuts.append((self.records, self.position, self.lines))
        while len(self.cuts) > self.max_cuts:
            self.cuts, self.grain = self.cuts[1::2], self.grain * 2

    def _one_field_lines_decided(self, view: np.ndarray, data: bytearray, ends: np.ndarray, record: np.ndarray):
        """`record` with each line that no delimiter split marked a record or not, as the exact read
        would: an empty line is none, nor is a line of whitespace; a quoted field alone is one."""
        starts = np.concatenate(([0], ends[:-1] + 1))
        lengths = ends - starts
        empty = (lengths == 0) | ((lengths == 1) & (view[ends - 1] == RETURN))
        for index in np.flatnonzero(~record & ~empty):
            record[index] = self._one_field_record(data[starts[index] : ends[index]])
        return record

    def _one_field_record(self, line: bytearray) -> bool:
        """Whether the exact read takes this line, which no delimiter splits, for a record."""
        text = line.decode()
        row = next(csv.reader(io.StringIO(text, newline=""), delimiter=self.delimiter.decode()), [])
        return is_record(row, text)

    def _unreadable(self, line: bytearray) -> bool:
        """Whether the exact read rejects this line, the csv module unable to read it."""
        try:
            list(csv.reader(io.StringIO(line.decode(), newline=""), delimiter=self.delimiter.decode(), strict=True))
        except csv.Error:
            return True
        return False


def _longest(ends: np.ndarray, filled: int) -> int:
    """The bytes of the longest record in a block of `filled` bytes whose records end at `ends`, the
    unfinished one after them included."""
    starts = np.concatenate(([0], ends + 1))
    return int(np.diff(np.append(starts, filled)).max())


class Scanned(NamedTuple):
    """What a ScanAlong found: the layout it scanned by, and the records and cut points."""

    delimiter: str
    columns: list[str]
    data_offset: int
    header_lines: int
    records: int
    cuts: list[tuple[int, int, int]]
    rejected: list[tuple[int, int]]  # the byte ranges of the records the exact read rejects
    sample: "list[tuple[bytes, int]] | None" = None  # the type sample's pieces, each with where it ends

    def matches(self, layout: dict, data_offset: int, header_lines: int) -> bool:
        return (self.delimiter, self.columns, self.data_offset, self.header_lines) == (
            layout["delimiter"],
            layout["columns"],
            data_offset,
            header_lines,
        )


class ScanAlong:
    """The scan, run on a thread of its own while staging copies the data: the copy hands over each
    chunk it reads, so the data is read once, and the scan runs beside the copy (the scan, the hashing
    and the writes let go of the GIL). Anything that is not a CSV this scan can vouch for leaves no
    result, and staging reads the staged copy as before."""

    QUEUED_CHUNKS = 64

    def __init__(self, name: str, grain: int, max_cuts: int, size: int | None = None):
        """`size`, the data's bytes when known beforehand, places the type sample: its pieces are kept as
        the scan passes them, so describing the copy does not read them from it again."""
        self.name, self.grain, self.max_cuts, self.size = name, grain, max_cuts, size
        self.chunks: queue.Queue[tuple[bytes, Callable[[], None] | None] | None] = queue.Queue(
            maxsize=self.QUEUED_CHUNKS
        )
        self.scanned: Scanned | None = None
        self.thread = threading.Thread(target=self._run, name="e31-scan-along", daemon=True)
        self.thread.start()

    def feed(self, data, done: Callable[[], None] | None = None) -> None:
        """Scan `data` (some bytes) next; `done` is called once the scan no longer reads it (a buffer
        lent, not given)."""
        self.chunks.put((data, done))

    def finish(self) -> Scanned | None:
        """The scan's result, once the copy has handed over its last chunk."""
        self.chunks.put(None)
        self.thread.join()
        return self.scanned

    def _run(self) -> None:
        stream = _ChunkStream(self.chunks)
        try:
            head = stream.head(SAMPLE_BYTES + 1)
            layout = detect(head[:SAMPLE_BYTES], at_eof=len(head) <= SAMPLE_BYTES, name=self.name)
            if layout["format"] != "csv":
                return
            columns, data_offset, header_lines = read_header(io.BytesIO(head), layout)
            if (data_offset >= len(head) and len(head) > SAMPLE_BYTES) or len(columns) < 2:
                return  # a header longer than the head, or one column: the read after the copy decides
            sampler = _Sampler(data_offset, self.size) if self.size else None
            scan = _Scan(layout["delimiter"], data_offset, header_lines, self.grain, self.max_cuts, sampler)
            records, cuts = scan.run(stream, lambda done: None)
            sample = sampler.pieces if sampler and stream.position == self.size else None
            self.scanned = Scanned(
                layout["delimiter"], columns, data_offset, header_lines, records, cuts, scan.rejected, sample
            )
        except (Unsure, FormatError):
            return  # the read after the copy goes the exact way, and words any error
        except Exception:
            log.exception("the scan beside the copy of %s failed; the staged copy is read instead", self.name)
        finally:
            stream.drain()


class _ChunkStream:
    """The chunks a ScanAlong is handed, read as a stream that only goes forward; each chunk's `done`
    is called once it is read to its end (or drained)."""

    def __init__(self, chunks: queue.Queue):
        self.chunks = chunks
        self.held: deque[memoryview] = deque()  # chunks taken from the queue and not yet read
        self.dones: deque[Callable[[], None] | None] = deque()  # each held chunk's
        self.position = 0  # bytes read (or skipped) so far
        self.ended = False

    def _take(self) -> bool:
        if self.ended:
            return False
        item = self.chunks.get()
        if item is None:
            self.ended = True
            return False
        chunk, done = item
        self.held.append(memoryview(chunk))
        self.dones.append(done)
        return True

    def head(self, size: int) -> bytes:
        """The first `size` bytes (fewer at the end), left to be read again."""
        while sum(len(chunk) for chunk in self.held) < size and self._take():
            pass
        return b"".join(self.held)[:size]

    def seek(self, position: int) -> None:
        if position < self.position:
            raise ValueError("a chunk stream only goes forward")
        while self.position < position and (self.held or self._take()):
            skip = min(len(self.held[0]), position - self.position)
            self._consume(skip)

    def readinto(self, buffer) -> int:
        """Fill the buffer, as a file would (short only at the end): the blocks, and so the cut
        points, are then those of a scan of the staged copy."""
        count = 0
        while count < len(buffer) and (self.held or self._take()):
            taken = min(len(buffer) - count, len(self.held[0]))
            buffer[count : count + taken] = self.held[0][:taken]
            self._consume(taken)
            count += taken
        return count

    def _consume(self, count: int) -> None:
        self.position += count
        if count == len(self.held[0]):
            self._let_go()
        else:
            self.held[0] = self.held[0][count:]

    def _let_go(self) -> None:
        self.held.popleft()
        if done := self.dones.popleft():
            done()

    def drain(self) -> None:
        """Take what is left, so the copy never waits on a scan that has stopped."""
        while self.held or self._take():
            self._let_go()


def _spread(begin: int, end: int) -> tuple[int, list[int]]:
    """The type sample's pieces between `begin` and `end`: their length, and where each is to begin.
    SAMPLE_PIECES spread over it, its end included; over data no larger than TYPE_SAMPLE_BYTES, pieces
    of MAX_BLOCK one after another, all of it."""
    whole = end - begin
    if whole <= TYPE_SAMPLE_BYTES:
        return MAX_BLOCK, list(range(begin, end, MAX_BLOCK))
    length, last = TYPE_SAMPLE_BYTES // SAMPLE_PIECES, SAMPLE_PIECES - 1
    return length, [begin + number * (whole - length) // last for number in range(SAMPLE_PIECES)]


def _sample(bounds: list[int]) -> list[tuple[int, int]]:
    """About TYPE_SAMPLE_BYTES of records between record boundaries, in pieces spread over the file,
    its end included: all of it when the data is no larger."""
    if bounds[-1] - bounds[0] <= TYPE_SAMPLE_BYTES:
        return _every_piece(bounds)
    piece, targets = _spread(bounds[0], bounds[-1])
    pieces: list[tuple[int, int]] = []
    for target in targets:
        begin = bounds[max(0, bisect.bisect_right(bounds, target) - 1)]
        if pieces and begin < pieces[-1][1]:
            begin = pieces[-1][1]
        end = bounds[min(len(bounds) - 1, bisect.bisect_left(bounds, begin + piece))]
        if end > begin:
            pieces.append((begin, end))
    return pieces


class _Sampler:
    """The type sample taken as the scan passes the data: SAMPLE_PIECES pieces of about
    TYPE_SAMPLE_BYTES / SAMPLE_PIECES each, spread over the records from `data_offset` to `size` as
    _sample spreads them, each from the last record boundary at or before where it is to begin to the
    first at or after its length. Data no larger than TYPE_SAMPLE_BYTES is kept whole."""

    def __init__(self, data_offset: int, size: int):
        self.length, self.starts = _spread(data_offset, size)
        self.pieces: list[tuple[bytes, int]] = []
        self.begin: int | None = None  # where the piece being kept begins; None between pieces
        self.kept = bytearray()
        self.ended = data_offset  # where the last piece kept ends

    def take(self, data: bytearray, position: int, length: int, ends: np.ndarray) -> None:
        """The scan's block `data[:length]`, which starts at `position` (a record boundary, as is
        its end), with its record ends (each the index of a newline) in `ends`."""
        block_end = position + length
        while self.starts:
            if self.begin is None:
                wanted = max(self.starts[0], self.ended)
                if wanted >= block_end:
                    return
                before = int(np.searchsorted(ends, wanted - position - 1, side="right"))  # record ends up to it
                self.begin = position + (int(ends[before - 1]) + 1 if before else 0)
            since = max(self.begin, position) - position
            if self.begin + self.length > block_end:
                self.kept += data[since:length]
                return
            after = int(np.searchsorted(ends, self.begin + self.length - position - 1))
            end = position + int(ends[after]) + 1 if after < len(ends) else block_end
            self.kept += data[since : end - position]
            self.pieces.append((bytes(self.kept), end))
            self.starts.pop(0)
            self.kept, self.ended, self.begin = bytearray(), end, None

    def finish(self, end: int) -> None:
        """The data ended at `end`: a piece begun is kept as far as it got."""
        if self.begin is not None and self.kept:
            self.pieces.append((bytes(self.kept), end))
        self.begin, self.kept, self.starts = None, bytearray(), []


def _every_piece(bounds: list[int]) -> list[tuple[int, int]]:
    """All the records, in pieces of about MAX_BLOCK bytes between record boundaries."""
    pieces, begin = [], bounds[0]
    for end in bounds[1:]:
        if end - begin >= MAX_BLOCK or end == bounds[-1]:
            pieces.append((begin, end))
            begin = end
    return [piece for piece in pieces if piece[1] > piece[0]]


def _read_pieces(stream: BinaryIO, pieces: list[tuple[int, int]]) -> Iterator[tuple[bytes, int]]:
    """Each piece's bytes, read when they are asked for, with where the piece ends."""
    for begin, end in pieces:
        stream.seek(begin)
        yield stream.read(end - begin), end


def _without(pieces: Iterable[tuple[bytes, int]], rejected: list[tuple[int, int]]) -> Iterator[tuple[bytes, int, int]]:
    """Each piece (its bytes, where it ends) with the records the exact read rejects cut out, as
    `rejected` places them, and how many were: pyarrow would read some of them (a stray quote), and a
    scanner sees only the records the pass reads."""
    begins = [begin for begin, _ in rejected]
    for data, end in pieces:
        start = end - len(data)
        inside = rejected[bisect.bisect_left(begins, start) : bisect.bisect_left(begins, end)]
        if not inside:
            yield data, end, 0
            continue
        gaps = zip([start] + [stop for _, stop in inside], [begin for begin, _ in inside] + [end], strict=True)
        yield b"".join(data[begin - start : stop - start] for begin, stop in gaps), end, len(inside)


def _parse_pieces(pieces: Iterable[tuple[bytes, int, int]], layout: dict, add_table, advance) -> int:
    """Parse each piece (its bytes, where it ends, the rejected records cut out of it) with pyarrow
    (PARSERS at once: it lets go of the GIL) and hand its table to `add_table`, in order; the records
    parsed or cut out."""
    columns, delimiter, parsed = layout["columns"], layout["delimiter"], 0
    parsing: deque[tuple[Future, int, int]] = deque()

    def take_one() -> None:
        nonlocal parsed
        future, end, cut = parsing.popleft()
        table, malformed = future.result()
        if table.num_rows:
            add_table(table)
        parsed += table.num_rows + malformed + cut
        advance(end)

    with ThreadPoolExecutor(max_workers=PARSERS, thread_name_prefix="e31-csv") as parsers:
        for data, end, cut in pieces:
            parsing.append((parsers.submit(_parse, data, columns, delimiter), end, cut))
            if len(parsing) > PARSERS:
                take_one()
        while parsing:
            take_one()
    return parsed
