"""A CSV record the csv module cannot read is rejected with its line and the reason, and the read goes
on: a stray quote rejects its record to the end of its line; a quote left open rejects its record up
to the line where it opened, and the read goes on at the next line. The exact read, a shard read
alone, the fast scan and the shards cut from it agree on every such file, made at random; and a job
over one succeeds, each bad record in its rejects."""

import csv
import io
import itertools
import json
import random
from dataclasses import dataclass

import pyarrow.parquet as pq
import pytest

from jobs import processors
from jobs.models import Job, State
from jobs.processors import Record
from jobs.staging import fastcsv
from jobs.staging.formats import read_header
from tests.jobs.staging.reading import COMMAS, described, job_for, read, shard_records
from tests.support import OutputZip, job_form, wait_for_end

HEADER = "id,name,amount"
STRAY = "a closing quote is followed by more of the field (',' expected after '\"')"


def never_closed(line: int) -> str:
    return f"a quote opened on line {line} is never closed"


def found(data: bytes) -> list[tuple[int, int, str | None, str]]:
    """Each record the exact read finds: its line, the line it ends on, its error and its text."""
    _, records = read(data, COMMAS)
    return [(r.line, r.end_line, r.error, data[r.start : r.end].decode().rstrip("\r\n")) for r in records]


@pytest.mark.parametrize(
    ("data", "records"),
    [
        (
            b'a,b\n1,2\n2,"x"junk\n3,4\n',
            [(2, 2, None, "1,2"), (3, 3, STRAY, '2,"x"junk'), (4, 4, None, "3,4")],
        ),
        (
            b'a,b\n1,"two\nlines"junk\n3,4\n',
            [(2, 3, STRAY, '1,"two\nlines"junk'), (4, 4, None, "3,4")],
        ),
        (
            b'a,b\n1,2\n"3,4\n5,6\n',
            [(2, 2, None, "1,2"), (3, 3, never_closed(3), '"3,4'), (4, 4, None, "5,6")],
        ),
        (
            b'a,b\n1,"x\ny","never\n\n4,5\n',
            [(2, 3, never_closed(3), '1,"x\ny","never'), (5, 5, None, "4,5")],
        ),
        (
            b'a,b\r\n1,2\r\n\r\n3,"\r\n4,5\r\n',
            [(2, 2, None, "1,2"), (4, 4, never_closed(4), '3,"'), (5, 5, None, "4,5")],
        ),
        (
            b'a,b\n1,2\n3,"open',
            [(2, 2, None, "1,2"), (3, 3, never_closed(3), '3,"open')],
        ),
        (
            b"a,b\n1,2,3\n4,5\n",
            [(2, 2, "expected 2 fields, found 3", "1,2,3"), (3, 3, None, "4,5")],
        ),
    ],
    ids=[
        "stray quote",
        "stray quote on a field's second line",
        "quote left open mid-file",
        "left open after a closed multi-line field",
        "left open with crlf",
        "left open at the end, no newline",
        "too wide",
    ],
)
def test_it_rejects_what_it_cannot_read_and_reads_on(data, records):
    assert found(data) == records


# Files made at random: every record read once, by each reading


@dataclass
class Made:
    """A CSV made at random, and what the exact read must find in it, where that is known: each record's
    first line and its error (None when it is kept, a prefix of the reason when not)."""

    data: bytes
    expected: list[tuple[int, str | None]] | None


NAMES = ["plain", '"with, a comma"', '"two\nlines"', '"say ""hi"""', "5'11\"", "Ünïcödé €", '""', '"x"" ""y"', "  "]


def predictable(seed: int) -> Made:
    """A CSV whose bad records cannot run into each other: stray quotes, too wide and too narrow rows,
    blank lines, quoted newlines, CRLF or LF, and one quote left open, mid-file (no quote after it) or
    at the end."""
    chosen = random.Random(seed)
    newline = chosen.choice(["\n", "\r\n"])
    lines, expected = [HEADER], []

    def add(text: str, error: str | None) -> None:
        expected.append((sum(line.count("\n") + 1 for line in lines) + 1, error))
        lines.append(text.replace("\n", newline))

    for n in range(chosen.randint(20, 120)):
        kind = chosen.choice(["good"] * 6 + ["wide", "narrow", "stray", "stray on a second line", "blank"])
        if kind == "good":
            add(f"{n},{chosen.choice(NAMES)},{n}.5", None)
        elif kind == "wide":
            add(f"{n},x,1.5,extra", "expected 3 fields, found 4")
        elif kind == "narrow":
            add(f"{n},x", "expected 3 fields, found 2")
        elif kind == "stray":
            add(f'{n},"x"junk,1.5', "a closing quote is followed")
        elif kind == "stray on a second line":
            add(f'{n},"x\ny"junk,1.5', "a closing quote is followed")
        else:
            lines.append(chosen.choice(["", "   ", "\t"]))
    if chosen.random() < 0.7:
        add(f'{len(lines)},"open,1.5', "a quote opened on line")
        for n in range(chosen.randint(0, 30)):  # no quote after it: it is never closed
            if chosen.random() < 0.8:
                add(f"{n},plain {n},{n}.5", None)
            else:
                add(f"{n},x", "expected 3 fields, found 2")
    text = newline.join(lines) + chosen.choice([newline, ""])
    return Made(text.encode(), expected)


FRAGMENTS = ['"', '""', '"x"y', '"a\nb"', 'x"y', '"open', '"x""', "plain", "", '"q, c"', " ", "é"]


def chaotic(seed: int) -> Made:
    """A CSV of fields cut from quotes at random: which records it holds is what the exact read says."""
    chosen = random.Random(seed)
    newline = chosen.choice(["\n", "\r\n"])
    fields = [chosen.choices(FRAGMENTS, k=chosen.randint(0, 5)) for _ in range(chosen.randint(5, 80))]
    rows = [HEADER] + [",".join(row) for row in fields]
    text = newline.join(row.replace("\n", newline) for row in rows) + chosen.choice([newline, ""])
    return Made(text.encode(), None)


MADE = [predictable(seed) for seed in range(60)] + [chaotic(seed) for seed in range(60)]


def scan(data: bytes, grain: int) -> tuple[fastcsv._Scan, list[tuple[int, int, int]]]:
    """The fast scan over the records after the header, a cut point every `grain` records."""
    _, offset, header_lines = read_header(io.BytesIO(data), COMMAS)
    scanned = fastcsv._Scan(",", offset, header_lines, grain, 10_000)
    _, cuts = scanned.run(io.BytesIO(data), lambda done: None)
    return scanned, cuts


def lines_of(data: bytes, end: int) -> int:
    """The lines that begin before byte `end`."""
    return data[:end].count(b"\n") + (0 if end == 0 or data[end - 1] == ord("\n") else 1)


def assert_each_line_read_once(data: bytes, offset: int, records: list[Record]) -> None:
    """The records follow each other from the header's end to the data's, blank lines between them,
    positions 1, 2, 3, ...; their lines are those they span."""
    at = offset
    for position, record in enumerate(records, start=1):
        assert not data[at : record.start].strip(), "only blank lines between records"
        assert record.position == position
        assert (record.line, record.end_line) == (lines_of(data, record.start) + 1, lines_of(data, record.end))
        at = record.end
    assert not data[at:].strip()


@pytest.mark.parametrize(
    "made", MADE, ids=[f"predictable {seed}" for seed in range(60)] + [f"chaotic {seed}" for seed in range(60)]
)
def test_each_reading_finds_each_record_once(made):
    layout, records = read(made.data, COMMAS)
    _, offset, header_lines = read_header(io.BytesIO(made.data), COMMAS)
    assert_each_line_read_once(made.data, offset, records)
    if made.expected is not None:
        assert len(records) == len(made.expected)
        for record, (line, error) in zip(records, made.expected, strict=True):
            assert record.line == line
            assert (record.error is None) if error is None else record.error.startswith(error), (record, error)
    for record in records:  # each record read alone, as a shard of one, is itself
        alone = {"start_byte": record.start, "end_byte": record.end, "first_record": record.position}
        assert shard_records(made.data, layout, {**alone, "first_line": record.line}) == [record]
    scanned, cuts = scan(made.data, grain=3)
    assert scanned.records == len(records)
    assert scanned.rejected == [(r.start, r.end) for r in records if r.value is None]
    for (first, start, line), (count, end, end_line) in itertools.pairwise([(0, offset, header_lines), *cuts]):
        shard = {"start_byte": start, "end_byte": end, "first_record": first + 1, "first_line": line + 1}
        assert shard_records(made.data, layout, shard) == records[first:count], "a shard as a slot reads it"
        assert end_line == lines_of(made.data, end)
    assert cuts[-1][:2] == (len(records), len(made.data))


# Staging: the fast read, the exact read and the shards, and what the scanner sees


def large(seed: int) -> bytes:
    """A file past the fast read's smallest, of predictable and chaotic parts one after another."""
    parts = [predictable(seed * 10 + n).data.split(b"\n", 1)[1] for n in range(12)]
    parts += [chaotic(seed * 10 + n).data.split(b"\n", 1)[1] for n in range(12)]
    random.Random(seed).shuffle(parts)
    body = b"\n".join(part.rstrip(b"\r\n") for part in parts) + b"\n"
    good = b"".join(b"%d,name %d,%d.5\n" % (n, n, n) for n in range(3000))
    return HEADER.encode() + b"\n" + good + body + good


@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.usefixtures("small_blocks")
def test_staging_reads_a_file_of_bad_records_fast_as_the_exact_read_does(organisation, seed):
    data = large(seed)
    job = job_for(organisation)
    layout, plan, total, shards = described(job, data)
    fast_total, _, _ = fastcsv.read(
        io.BytesIO(data), layout, layout["data_offset"], 1, len(data), None, lambda done: None
    )
    assert fast_total == total, "the fast read took this file"
    _, exact_plan, exact_total, exact_shards = described(job, data, exact=True)
    assert (total, plan) == (exact_total, exact_plan)
    _, records = read(data, COMMAS)
    assert len(records) == total
    assert sum(record.error is not None for record in records) > 50
    for cut in (shards, exact_shards):
        assert len(cut) > 1
        read_back = [record for shard in cut for record in shard_records(data, layout, shard)]
        assert read_back == records, "the shards hold every record once, rejects too"


@pytest.mark.django_db
@pytest.mark.usefixtures("small_blocks")
def test_no_scanner_sees_a_record_the_pass_rejects(organisation):
    """A stray quote pyarrow would read as a value, and a quote left open that would swallow the
    lines after it: with a threshold of 1, either would make the amounts strings."""
    good = b"".join(b"%d,name %d,%d.5\n" % (n, n, n) for n in range(3000))
    data = HEADER.encode() + b"\n" + good + b'1,"x"y,lots\n2,"open,1.5\n' + good
    job = job_for(organisation)
    job.params = processors.get("clean-table").validate_params({"type_threshold": "1"})
    _, plan, total, _ = described(job, data)
    _, exact_plan, exact_total, _ = described(job, data, exact=True)
    assert total == exact_total == 6002
    assert [column["type"] for column in plan["columns"]] == ["int", "string", "float"]
    assert plan == exact_plan


# End to end


def bad_lines() -> tuple[bytes, dict[int, tuple[str, str]]]:
    """A CSV past the fast read's smallest, of 60,000 good records with bad ones among them, and each bad
    one's line with its reason and text."""
    lines, bad = [HEADER], {}

    def add_bad(text: str, reason: str) -> None:
        bad[len(lines) + 1] = (reason, text)
        lines.append(text)

    for n in range(1, 60_001):
        lines.append(f"{n},name {n} in a line long enough for the fast read to take the file,{n}.5")
        if n % 10_000 == 0:
            add_bad(f'{n},"x"junk,1.5', STRAY)
            add_bad(f"{n},x,1.5,extra", "expected 3 fields, found 4")
    add_bad('60001,"never closed,1.5', never_closed(len(lines) + 1))
    return ("\n".join(lines) + "\n").encode(), bad


@pytest.mark.django_db(transaction=True)
def test_a_job_with_bad_lines_succeeds_with_them_in_its_rejects(fleet, partner_client):
    data, bad = bad_lines()
    assert len(data) > fastcsv.BLOCKS_PER_FILE * fastcsv.MIN_BLOCK, "large enough for the fast read to take"
    partner_client.post("/jobs/new/", job_form(data, name="bad-lines.csv", gpus="2"))
    job = wait_for_end(Job.objects.get(), timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    whole = OutputZip(partner_client, job)
    rows = pq.read_table(io.BytesIO(whole.read("output.parquet"))).to_pylist()
    rejects = list(csv.DictReader(io.StringIO(whole.read("rejects.csv").decode())))
    assert job.records_total == 60_000 + len(bad)
    positions = [row["_record"] for row in rows] + [int(row["record"]) for row in rejects]
    assert sorted(positions) == list(range(1, job.records_total + 1)), "every record exactly once"
    assert {int(row["line"]): (row["reason"], row["raw"]) for row in rejects} == bad
    assert [row["id"] for row in rows] == list(range(1, 60_001))
    manifest = json.loads(whole.read("manifest.json"))
    assert (manifest["records"]["out"], manifest["records"]["rejected"]) == (60_000, len(bad))
    assert len(manifest["shards"]) > 1
