"""Staging's fast CSV read agrees with the exact read: the same record count, shards that a slot
reads back record for record, the same column types; and what it cannot vouch for, it leaves to the
exact read, which names the line."""

import csv
import io
import random
import re

import numpy as np
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from jobs import processors
from jobs.models import Job, State
from jobs.staging import fastcsv, scankernel, stage
from jobs.staging.fastcsv import ScanAlong
from jobs.staging.formats import FormatError, iter_records, read_header
from jobs.staging.scankernel import FIELDS, ONE_FIELD, UNREADABLE, scan_block
from tests.jobs.staging.reading import described, job_for, read, shard_records
from tests.support import EXAMPLE

pytestmark = pytest.mark.django_db

HEADER = b"id,name,score,day\n"
SHARD_FIELDS = ("index", "first_record", "record_count", "first_line", "start_byte", "end_byte")


def rows(count: int, newline: bytes = b"\n") -> bytes:
    return b"".join(
        b'%d,"name %d, with a comma",%d.5,2026-01-%02d%s' % (n, n, n, 1 + n % 28, newline) for n in range(count)
    )


DATASETS = {
    "example (quoted newlines, dirty rows)": EXAMPLE.read_bytes(),
    "crlf": HEADER.replace(b"\n", b"\r\n") + rows(3000, b"\r\n"),
    "blank and whitespace lines": HEADER + rows(1500) + b"\n   \n\t\n" + rows(1500) + b"\n\n",
    "short and long rows": HEADER + rows(1500) + b"1,2\n1,2,3,4,5,6\n" + rows(1500),
    "no newline at the end": HEADER + rows(2000).rstrip(b"\n"),
    "byte order mark": b"\xef\xbb\xbf" + HEADER + rows(2000),
    "doubled quotes": HEADER + b"".join(b'%d,"say ""hi"", %d",1.5,2026-01-01\n' % (n, n) for n in range(2000)),
    "quotes inside unquoted fields": HEADER
    + rows(1500)
    + b'5,height 5\'11",3.5,2026-01-01\n6,a "quoted" word,3.5,2026-01-02\n'
    + rows(1500),
    "blank quoted fields alone on a line": HEADER + rows(1500) + b'""\n" "\n"\t"\n' + rows(1500),
    "a record longer than a block": HEADER + rows(300) + b'7,"' + b"long line\n" * 20_000 + b'",1.5,2026-01-01\n',
    "stray quotes": HEADER
    + rows(1500)
    + b'5,"quoted" then more,3.5,2026-01-01\n6,"two\nlines"x,1,2026-01-02\n7,"x"y\n'
    + rows(1500),
    "a quote left open": HEADER
    + rows(1500)
    + b'5,"never closed,3.5,2026-01-01\n'
    + b"".join(b"%d,plain %d,%d.5,2026-01-02\n" % (n, n, n) for n in range(1500)),
}


@pytest.mark.parametrize("name", list(DATASETS))
@pytest.mark.usefixtures("small_blocks")
def test_the_fast_read_agrees_with_the_exact_read(organisation, name):
    data = DATASETS[name]
    job = job_for(organisation)
    layout, plan, total, shards = described(job, data)
    fast_total, _, _ = fastcsv.read(
        io.BytesIO(data), layout, layout["data_offset"], shards[0]["first_line"] - 1, len(data), None, lambda done: None
    )
    assert fast_total == total, "the fast read took this dataset"
    exact_layout, exact_plan, exact_total, _ = described(job, data, exact=True)
    assert total == exact_total
    assert plan == exact_plan
    assert layout["columns"] == exact_layout["columns"]
    assert len(shards) > 1
    lines = {
        record.position: record.line
        for record in iter_records(
            io.BytesIO(data[layout["data_offset"] :]), exact_layout, start=layout["data_offset"], first_line=2
        )
    }
    position = 1
    for shard in shards:  # each shard, read back as a slot reads it, holds exactly its records, on their lines
        assert shard["first_record"] == position
        records = shard_records(data, layout, shard)
        assert [record.position for record in records] == list(range(position, position + shard["record_count"]))
        assert [record.line for record in records] == [lines[record.position] for record in records]
        position += shard["record_count"]
    assert position == total + 1


LONE_RETURN = HEADER + rows(3000) + b"5,carriage\rreturn,3.5,2026-01-01\n" + rows(10)
LATIN_1 = HEADER + rows(3000) + b"5,caf\xe9,3.5,2026-01-01\n"


@pytest.mark.parametrize("data", [LONE_RETURN, LATIN_1], ids=["lone carriage return", "latin-1 byte"])
@pytest.mark.usefixtures("small_blocks")
def test_the_fast_read_leaves_what_it_cannot_vouch_for_to_the_exact_read(data):
    assert len(data) > fastcsv.BLOCKS_PER_FILE * fastcsv.MIN_BLOCK, "large enough for the fast read to try"
    layout = {"format": "csv", "delimiter": ",", "quotechar": '"', "columns": ["id", "name", "score", "day"]}
    with pytest.raises(fastcsv.Unsure):
        fastcsv.read(io.BytesIO(data), layout, len(HEADER), 1, len(data), None, lambda done: None)


def test_the_exact_read_rejects_a_lone_carriage_return_in_an_unquoted_field(organisation):
    _, _, total, _ = described(job_for(organisation), LONE_RETURN)
    assert total == 3011
    _, records = read(LONE_RETURN)
    assert [(record.line, record.error) for record in records if record.error] == [
        (3002, "a carriage return inside an unquoted field")
    ]


def test_the_exact_read_names_the_line_of_a_byte_that_is_not_utf8(organisation):
    with pytest.raises(FormatError, match=re.escape("Line 3002 is not UTF-8 text (byte 0xe9).")):
        described(job_for(organisation), LATIN_1)


@pytest.mark.usefixtures("small_blocks")
def test_types_come_from_a_sample_across_a_large_file(organisation, monkeypatch):
    """Past TYPE_SAMPLE_BYTES the types come from pieces spread over the file, its end included; the
    count stays exact, and the value that does not fit is left to the pass to reject."""
    monkeypatch.setattr(fastcsv, "TYPE_SAMPLE_BYTES", 32 * 1024)
    data = HEADER + rows(6000) + b"6000,late,not a number,2026-01-01\n"
    job = job_for(organisation)
    _, plan, total, shards = described(job, data)
    assert total == 6001
    assert [column["type"] for column in plan["columns"]] == ["int", "string", "float", "date"]
    assert 0 < plan["sampled_records"] < total
    assert sum(shard["record_count"] for shard in shards) == 6001
    job.params = processors.get("clean-table").validate_params({"type_threshold": "1"})
    _, every, total, _ = described(job, data)
    assert total == 6001 and "sampled_records" not in every, "a threshold of 1 counts every value"
    assert [column["type"] for column in every["columns"]] == ["int", "string", "string", "date"]


@pytest.mark.usefixtures("small_blocks")
def test_whole_floats_make_a_float_column_not_an_int_one(organisation):
    """pyarrow reads "2.0" as 2.0; such a column is float (the exact read's kind), not int, which
    would reject every record at the pass."""
    data = HEADER + b"".join(b'%d,"n %d",%d.0,2026-01-01\n' % (n, n, n) for n in range(3000))
    job = job_for(organisation)
    _, plan, _, _ = described(job, data)
    _, exact_plan, _, _ = described(job, data, exact=True)
    assert plan["columns"][2]["type"] == exact_plan["columns"][2]["type"] == "float"


def staged_upload(organisation, data: bytes) -> Job:
    """A job staged as the control worker stages it, from `data` uploaded; it must be queued."""
    job = job_for(organisation)
    Job.objects.filter(pk=job.pk).update(
        state=State.SUBMITTED, source_path=default_storage.save("test-fastcsv/upload.csv", ContentFile(data))
    )
    stage.stage(job.pk)
    job.refresh_from_db()
    assert job.state == State.QUEUED, job.error
    return job


@pytest.mark.parametrize(
    "name",
    [
        "example (quoted newlines, dirty rows)",
        "crlf",
        "blank and whitespace lines",
        "stray quotes",
        "a quote left open",
    ],
)
@pytest.mark.usefixtures("small_blocks")
def test_the_scan_beside_the_copy_finds_what_the_read_after_it_would(organisation, monkeypatch, name):
    """Staging scans a CSV while it copies it, once: the records and shards are those the staged copy,
    read on its own, gives."""
    data = DATASETS[name]
    scans = []
    run = fastcsv._Scan.run

    def counted(scan, stream, advance):
        scans.append(type(stream).__name__)
        return run(scan, stream, advance)

    monkeypatch.setattr(fastcsv._Scan, "run", counted)
    job = staged_upload(organisation, data)
    assert scans == ["_ChunkStream"], "one scan, beside the copy"
    shards = list(job.shards.order_by("index").values(*SHARD_FIELDS))
    _, plan, total, alone = described(job_for(organisation), data)
    assert (job.records_total, job.plan) == (total, plan)
    assert shards == [{field: shard[field] for field in SHARD_FIELDS} for shard in alone]
    default_storage.delete(job.staged_path)


@pytest.mark.parametrize("name", list(DATASETS))
@pytest.mark.usefixtures("small_blocks")
def test_the_type_sample_kept_by_the_scan_is_whole_records_spread_over_the_file(monkeypatch, name):
    """The scan beside the copy keeps the type sample's pieces as they pass: each the data's own bytes
    from one record boundary to another, in order, none overlapping, from the first record to the
    last, about TYPE_SAMPLE_BYTES in all."""
    monkeypatch.setattr(fastcsv, "TYPE_SAMPLE_BYTES", 16 * 1024)
    monkeypatch.setattr(fastcsv, "SAMPLE_PIECES", 8)
    data = DATASETS[name]
    layout, records = read(data)
    _, offset, _ = read_header(io.BytesIO(data), layout)
    sampler = fastcsv._Sampler(offset, len(data))
    fastcsv._Scan(",", offset, 1, 250, 10_000, sampler).run(io.BytesIO(data), lambda done: None)
    pieces = sampler.pieces
    ends, longest = [record.end for record in records], max(record.end - record.start for record in records)
    boundaries = {offset, len(data), *ends}
    begins = [end - len(piece) for piece, end in pieces]
    assert len(pieces) > 1 and begins[0] == offset and pieces[-1][1] >= ends[-1], "the first record to the last"
    for (piece, end), begin in zip(pieces, begins, strict=True):
        assert piece == data[begin:end] and {begin, end} <= boundaries
    assert all(before[1] <= begin for before, begin in zip(pieces, begins[1:], strict=False)), "in order, apart"
    assert sum(len(piece) for piece, _ in pieces) <= 16 * 1024 + 8 * longest, "a sample: a record past each piece's end"


@pytest.mark.usefixtures("small_blocks")
def test_staging_takes_the_type_sample_from_the_scan_beside_the_copy_not_from_the_copy(organisation, monkeypatch):
    """The sample's pieces are not read from the staged copy again: they were kept as the copy passed."""
    monkeypatch.setattr(fastcsv, "TYPE_SAMPLE_BYTES", 32 * 1024)
    read_again = []
    monkeypatch.setattr(fastcsv, "_read_pieces", lambda *args: read_again.append(args) or [])
    job = staged_upload(organisation, HEADER + rows(6000) + b"6000,late,not a number,2026-01-01\n")
    assert read_again == []
    assert [column["type"] for column in job.plan["columns"]] == ["int", "string", "float", "date"]
    assert 0 < job.plan["sampled_records"] < job.records_total == 6001
    default_storage.delete(job.staged_path)


def test_a_scan_beside_the_copy_of_what_is_no_csv_leaves_nothing_and_keeps_the_copy_going():
    """Each chunk is taken, whatever the data: the copy never waits on a scan that gave up."""
    chunks = [b"\x89PNG\r\n\x1a\n" + bytes(70_000)] + [bytes(1024 * 1024)] * (ScanAlong.QUEUED_CHUNKS * 2)
    along = ScanAlong("image.png", 250, 10_000)
    for chunk in chunks:
        along.feed(chunk)
    assert along.finish() is None
    assert along.chunks.empty()


def scan(data: bytes) -> tuple[list[tuple[int, int, int]], int, bool, int]:
    """scan_block over all of `data`: each record's end, the newlines up to it, and its kind (one
    field, more, unreadable); the newlines, whether a quoted field is left open, where the first doubt
    lies."""
    buffer = bytearray(data)
    ends, lines = np.empty(len(data) + 1, np.int64), np.empty(len(data) + 1, np.int64)
    kinds = np.empty(len(data) + 1, np.uint8)
    count, newlines, quoted, doubt = scan_block(
        np.frombuffer(buffer, np.uint8), len(data), True, ord(","), ends, lines, kinds
    )
    found = zip(ends[:count].tolist(), lines[:count].tolist(), kinds[:count].tolist(), strict=True)
    return list(found), newlines, quoted, doubt


def records_by_the_csv_module(data: bytes) -> list[tuple[int, int, int]]:
    """Where Python's csv module (strict, as the exact read) ends each record, on which line, and its
    kind: one field, more, or unreadable (the csv module's error, which ends the record with its line)."""
    newline_at = [at for at, byte in enumerate(data) if byte == ord("\n")]
    reader = csv.reader(io.StringIO(data.decode(), newline=""), strict=True)
    found = []
    while True:
        try:
            row = next(reader, None)
        except csv.Error:
            kind = UNREADABLE
        else:
            if row is None:
                return found
            kind = FIELDS if len(row) > 1 else ONE_FIELD
        found.append((newline_at[reader.line_num - 1], reader.line_num, kind))


@pytest.mark.parametrize("seed", range(20))
def test_the_scan_ends_records_where_the_csv_module_does(seed):
    """At every place in the scan's 64-byte masks: fields quoted or not, with commas, newlines,
    doubled quotes and multi-byte characters inside, quotes inside unquoted fields, blank lines,
    CRLF or LF, and closing quotes followed by more of the field (unreadable to the end of the line)."""
    chosen = random.Random(seed)
    fields = [
        b"", b"12", b"plain", b'"a,b"', b'"two\nlines"', b'"say ""hi"""', b'""', b'""""', b"5'11\"", b'a "b" c',
        b' "x', "Ünïcödé €".encode(), "😀".encode(), b'"\xc3\xa9\n,"', b"  ", b"x" * 70, "é".encode() * 40,
        b'"' + b'long ""quoted"" text, ' * 4 + b'"', b'"' + b"y" * 61 + b'""\n"',
        b'"x"stray', b'"two\nlines"x', b'""junk', b'"' + b"z" * 62 + b'"?',
    ]  # fmt: skip
    newline = chosen.choice([b"\n", b"\r\n"])
    records = [b",".join(chosen.choices(fields, k=chosen.randint(0, 5))) for _ in range(200)]
    data = b"".join(record + newline for record in records)
    found, newlines, quoted, doubt = scan(data)
    assert found == records_by_the_csv_module(data)
    assert (newlines, quoted, doubt) == (data.count(b"\n"), False, len(data)), "nothing here to doubt"


@pytest.mark.parametrize(
    "text",
    [
        b"caf\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xf4\x8f\xbf\xbf", b"\xef\xbf\xbd",  # valid
        b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80", b"\xff",
        b"\xc3x", b"\xc3",
    ],
    ids=["2 bytes", "3 bytes", "4 bytes", "U+10FFFF", "U+FFFD", "overlong 2", "overlong 3", "surrogate",
         "past U+10FFFF", "cut short", "stray continuation", "0xff", "lead alone", "cut short at the end"],
)  # fmt: skip
def test_the_scan_takes_as_utf8_what_python_does(text):
    for padding in [*range(8), *range(56, 72), *range(120, 136)]:  # on each side of a 64-byte mask's edge
        data = b"x" * padding + b"1," + text + b",y\n2,z,w\n" + b"3,more,records\n" * 8
        if text == b"\xc3":
            data = data[: padding + 3]
        try:
            data.decode("utf-8")
            utf8 = True
        except UnicodeDecodeError:
            utf8 = False
        doubt = scan(data)[-1]
        assert (doubt == len(data)) is utf8, (padding, data)
        if not utf8:
            assert doubt == padding + 2, "the doubt is where the bad bytes begin"


@pytest.mark.parametrize(
    ("data", "doubt"),
    [
        (b"1,a\rb\n", 3), (b"1,a\r", 3), (b'1,"\xff"\n', 3), (b'1,5\'11",x\n2,a "b" c\n', None),
        (b'1,"a"\n2,"b"\r\n', None), (b'1,"quoted"then more,x\n', None), (b'1,"a"b,\xff\n', 7),
    ],
    ids=["carriage return alone", "carriage return at the end", "not UTF-8", "quotes inside unquoted fields",
         "none", "closing quote then more", "not UTF-8 after a closing quote then more"],
)  # fmt: skip
def test_the_scan_doubts_what_the_exact_read_would_refuse_or_read_otherwise(data, doubt):
    for length in range(0, 140, 3):  # the case on each side of a 64-byte mask's edge, more records after
        before = b"0," + b"a" * length + b"\n"
        after = b"" if data.endswith(b"\r") else b"9,z\n" * 20
        found = scan(before + data + after)[-1]
        assert found == (len(before + data + after) if doubt is None else len(before) + doubt), length


@pytest.mark.parametrize("length", range(0, 140, 3))
def test_the_scan_ends_a_record_unreadable_at_the_end_of_the_line_of_its_stray_quote(length):
    """On each side of a 64-byte mask's edge: the quotes after a stray one on its line open nothing."""
    before = b"0," + b"a" * length + b"\n"
    data = before + b'1,"x"y,"z\n2,"a\nb"c\n3,d\n'
    found, newlines, quoted, doubt = scan(data)
    assert found == [
        (len(before) - 1, 1, FIELDS),
        (len(before) + 9, 2, UNREADABLE),
        (len(before) + 18, 4, UNREADABLE),
        (len(before) + 22, 5, FIELDS),
    ]
    assert (newlines, quoted, doubt) == (5, False, len(data))


def test_the_scan_says_when_a_quoted_field_is_left_open():
    assert scan(b'1,"open\n2,x\n')[2] is True
    assert scan(b'1,"closed at the end"')[2] is False


def test_warming_the_scan_compiles_the_code_staging_runs():
    scankernel.warm()
    compiled = len(scan_block.signatures)
    fastcsv._Scan(",", len(HEADER), 1, 250, 10_000).run(io.BytesIO(HEADER + rows(3000)), lambda done: None)
    assert len(scan_block.signatures) == compiled, "staging's call needed no code of its own"
