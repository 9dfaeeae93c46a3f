"""Empty fields and blank lines in CSV, read as Python's csv module reads them: a quoted empty field
alone on a line (`""`) is a record (a null one in a one-column file, a ragged one in a wider file);
a line with nothing on it but whitespace is none. Staging's count, the shards and the slot's reader
agree on every record, its position and its line, on generated files of every such mix."""

import csv
import io
import json
import random

import pyarrow.parquet as pq
import pytest

from jobs.models import Job, State
from jobs.staging import fastcsv
from tests.jobs.staging.reading import COMMAS, described, job_for, read, shard_records
from tests.support import OutputZip, job_form, wait_for_end

VALUES = ["", " ", "x", "a b", 'say "hi"', "two\nlines", "1,5", "2;5", "é", "  padded  ", "12"]
BLANKS = ["", "   ", "\t", " \t "]


def quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def rendered(fields: list[str], delimiter: str, rng: random.Random) -> str:
    """A record's text: a field quoted when it must be (or by chance), and a lone blank field always,
    since unquoted it would be a blank line."""
    out = []
    for value in fields:
        must = any(char in value for char in (delimiter, '"', "\n", "\r")) or (len(fields) == 1 and not value.strip())
        out.append(quoted(value) if must or rng.random() < 0.2 else value)
    return delimiter.join(out)


def generated(seed: int, width: int, lines: int) -> tuple[bytes, str, list[tuple[int, int, list[str]]]]:
    """A CSV file of `width` columns with records, ragged records, lone quoted empty fields and blank
    lines, ending lines with LF or CRLF; its delimiter, and each record's position, line and fields."""
    rng = random.Random(seed)
    delimiter = rng.choice(",;") if width > 1 else ","
    header = delimiter.join(f"c{n}" for n in range(1, width + 1))
    text, csv_rows, records, line = [header + "\n"], [header.split(delimiter)], [], 2
    for _ in range(lines):
        ending = rng.choice(["\n", "\r\n"])
        kind = rng.random()
        if kind < 0.1:
            blank = rng.choice(BLANKS)
            text.append(blank + ending)
            csv_rows.append([blank] if blank else [])
            line += 1
            continue
        if kind < 0.2:
            fields = [rng.choice(["", " "])]  # a lone quoted blank field: `""` or `" "`
        elif kind < 0.25 and width > 1:
            fields = [rng.choice(VALUES) for _ in range(rng.choice([width - 1, width + 1]))]
        else:
            fields = [rng.choice(VALUES) for _ in range(width)]
        record = rendered(fields, delimiter, rng)
        text.append(record + ending)
        csv_rows.append(fields)
        records.append((len(records) + 1, line, fields))
        line += record.count("\n") + 1
    if rng.random() < 0.5:
        text[-1] = text[-1].rstrip("\r\n")  # no newline after the last line
    body = "".join(text)
    assert list(csv.reader(io.StringIO(body, newline=""), delimiter=delimiter)) == csv_rows, "Python's csv reads it so"
    return body.encode(), delimiter, records


def expected(records: list, width: int) -> list[tuple]:
    return [
        (position, line, fields, None if len(fields) == width else f"expected {width} fields, found {len(fields)}")
        for position, line, fields in records
    ]


CASES = [(seed, width) for seed in range(4) for width in (1, 2, 3, 5)]


@pytest.mark.parametrize(("seed", "width"), CASES)
def test_the_record_reader_reads_records_as_pythons_csv_does(seed, width):
    data, delimiter, records = generated(seed, width, lines=400)
    _, found = read(data, {**COMMAS, "delimiter": delimiter})
    assert [(r.position, r.line, r.value, r.error) for r in found] == expected(records, width)


@pytest.mark.django_db
@pytest.mark.parametrize(("seed", "width"), CASES)
@pytest.mark.parametrize("exact", [False, True], ids=["fast", "exact"])
@pytest.mark.usefixtures("small_blocks")
def test_staging_and_the_slots_agree_on_every_record(organisation, seed, width, exact):
    data, delimiter, records = generated(seed, width, lines=8000)
    # One column always goes the exact way; a wider file is large enough for the fast read to try.
    assert width == 1 or len(data) > fastcsv.BLOCKS_PER_FILE * fastcsv.MIN_BLOCK
    layout, _, total, shards = described(job_for(organisation), data, exact=exact)
    assert (layout["delimiter"], len(layout["columns"]), total) == (delimiter, width, len(records))
    found = []
    for shard in shards:  # each shard read back as a slot reads it
        found += shard_records(data, layout, shard)
    assert [(r.position, r.line, r.value, r.error) for r in found] == expected(records, width)


# Known cases, by name


def test_a_quoted_empty_line_in_a_one_column_csv_is_a_record():
    _, found = read(b'name\nann\n""\nbob\n', COMMAS)
    assert [(r.position, r.line, r.value) for r in found] == [(1, 2, ["ann"]), (2, 3, [""]), (3, 4, ["bob"])]


def test_a_blank_line_in_a_one_column_csv_is_no_record():
    _, found = read(b"name\nann\n\n   \r\n\t\nbob\n", COMMAS)
    assert [(r.position, r.line, r.value) for r in found] == [(1, 2, ["ann"]), (2, 6, ["bob"])]


def test_a_lone_quoted_empty_field_in_a_wider_csv_is_a_ragged_record():
    _, found = read(b'id,name\n1,ann\n""\r\n2,bob\n', COMMAS)
    assert [(r.position, r.line, r.error) for r in found] == [
        (1, 2, None),
        (2, 3, "expected 2 fields, found 1"),
        (3, 4, None),
    ]


def output_of(client, job: Job) -> tuple[list[dict], list[dict], dict]:
    whole = OutputZip(client, job)
    rows = pq.read_table(io.BytesIO(whole.read("output.parquet"))).to_pylist()
    rejects = list(csv.DictReader(io.StringIO(whole.read("rejects.csv").decode())))
    return rows, rejects, json.loads(whole.read("manifest.json"))


@pytest.mark.django_db(transaction=True)
def test_a_one_column_csv_keeps_its_quoted_empty_lines_as_null_records(fleet, partner_client):
    data = b'name\r\nann\r\n""\r\n\r\n   \r\n" "\r\nbob\r\n""'
    partner_client.post("/jobs/new/", job_form(data, name="names.csv", gpus="1"))
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    rows, rejects, manifest = output_of(partner_client, job)
    assert [(row["_record"], row["name"]) for row in rows] == [(1, "ann"), (2, None), (3, None), (4, "bob"), (5, None)]
    assert rejects == []
    assert (job.records_total, manifest["records"]["in"], manifest["records"]["out"]) == (5, 5, 5)


@pytest.mark.django_db(transaction=True)
def test_a_wider_csv_rejects_a_quoted_empty_line_with_its_line(fleet, partner_client):
    data = b'id,name\n1,ann\n""\n\n2,bob\n'
    partner_client.post("/jobs/new/", job_form(data, name="people.csv", gpus="1"))
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    rows, rejects, manifest = output_of(partner_client, job)
    assert [(row["_record"], row["id"]) for row in rows] == [(1, 1), (3, 2)]
    assert [(row["record"], row["line"], row["reason"], row["raw"]) for row in rejects] == [
        ("2", "3", "expected 2 fields, found 1", '""')
    ]
    assert (manifest["records"]["in"], manifest["records"]["out"], manifest["records"]["rejected"]) == (3, 2, 1)
