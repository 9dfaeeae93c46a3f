"""A quote that opens a field and is never closed rejects its record up to the line where it opened,
named in the reason, and the read goes on at the next line, wherever it is met: staging's exact read,
a shard read as a slot reads it (its end taken as the data's), past the field limit. In the header, it
fails staging, naming the line."""

import csv
import io

import pytest

from jobs.staging import fastcsv
from jobs.staging.formats import FormatError, detect, iter_records, open_quote_line
from tests.jobs.staging.reading import COMMAS, read

NEVER_CLOSED = "a quote opened here is never closed."


def never_closed(line: int) -> str:
    return f"a quote opened on line {line} is never closed"


def rows(first: int, count: int) -> bytes:
    return b"".join(b"%d,name %d,%d.5\n" % (n, n, n) for n in range(first, first + count))


@pytest.mark.parametrize(
    ("data", "line", "after"),
    [
        (b'a,b\n1,2\n"3,4\n5,6\n', 3, ["5", "6"]),
        (b'a,b\n1,"two\nlines"\n2,ok\n3,"x\ny","never\n\n4,5\n', 6, ["4", "5"]),
        (b'a,b\n1,"say ""hi""\n2,3\n', 2, ["2", "3"]),
        (b'a,b\n1,5\'11"\n2,"\n', 3, None),
        (b'a,b\r\n1,2\r\n\r\n3,"\r\n4,5\r\n', 4, ["4", "5"]),
    ],
    ids=["own line", "after a closed multi-line field", "doubled quotes", "inch mark first", "crlf"],
)
def test_it_rejects_up_to_the_line_where_the_unclosed_quote_opened_and_reads_on(data, line, after):
    _, records = read(data, COMMAS)
    assert [record.error for record in records if record.error] == [never_closed(line)]
    rejected = next(record for record in records if record.error)
    assert rejected.end_line == line
    assert records[-1].value == after, "the read goes on at the next line"


def test_in_the_header_it_fails_naming_the_line():
    with pytest.raises(FormatError) as raised:
        read(b'a,"b\n1,2\n', COMMAS)
    assert str(raised.value) == f"Line 1: {NEVER_CLOSED}"


@pytest.mark.parametrize("name", ["data.txt", "data.csv"])
def test_an_unclosed_quote_in_the_first_bytes_does_not_hide_that_it_is_csv(name):
    data = b'a;b\n1;2\n"3;4\n5;6\n'
    assert detect(data, at_eof=True, name=name) == {"format": "csv", "delimiter": ";", "quotechar": '"'}
    _, records = read(data)
    assert [(record.line, record.error) for record in records] == [(2, None), (3, never_closed(3)), (4, None)]


@pytest.mark.parametrize("after", [0, 3], ids=["at the end of the data", "at the end of the shard"])
def test_it_rejects_it_in_a_shard_read_as_a_slot_reads_it(after):
    shard = b'6,name 6,6.5\n11,"never closed,1.5\n12,name 12,12.5\n'
    data = b"id,name,amount\n" + rows(1, 5) + shard + rows(13, after)
    start = len(b"id,name,amount\n" + rows(1, 5))
    layout = {**COMMAS, "columns": ["id", "name", "amount"]}
    stream = io.BytesIO(data[start:])  # the data past the shard too, as staging reads it
    records = list(iter_records(stream, layout, start=start, end=start + len(shard), first_position=6, first_line=7))
    assert [(record.position, record.line, record.error) for record in records] == [
        (6, 7, None),
        (7, 8, never_closed(8)),
        (8, 9, None),
    ]
    assert data[records[1].start : records[1].end] == b'11,"never closed,1.5\n'


def test_a_quote_left_open_past_the_field_limit_says_so_and_the_fast_scan_leaves_it_to_the_exact_read():
    previous = csv.field_size_limit(1000)
    try:
        data = b"id,name,amount\n" + rows(1, 3) + b'4,"never closed,1.5\n' + rows(5, 200)
        _, records = read(data, COMMAS)
        assert [(record.line, record.error) for record in records if record.error] == [
            (5, "a quote opened on line 5 is not closed within 1,000 characters")
        ]
        assert [record.line for record in records] == list(range(2, 206)), "read on from the next line"
        with pytest.raises(fastcsv.Unsure):
            fastcsv._Scan(",", 15, 1, 250, 10_000).run(io.BytesIO(data), lambda done: None)
    finally:
        csv.field_size_limit(previous)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('1,"a', 0),
        ('1,"a"\n2,"b\nc', 1),
        ('1,"a""\n', 0),
        ('1,"a"""\n2,3', None),
        ("1,5'11\"\n", None),
        ('x"y,"z\n\n', 0),
        ("plain,text\n", None),
    ],
)
def test_it_reads_quotes_as_the_csv_module_does(text, line):
    assert open_quote_line(text, ",", '"') == line
    strict = csv.reader(io.StringIO(text, newline=""), strict=True)
    if line is None:
        list(strict)
    else:
        with pytest.raises(csv.Error, match="unexpected end of data"):
            list(strict)
