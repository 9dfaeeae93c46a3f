"""A quote that opens a field and is never closed is named as such, on the line where it opened,
wherever it is met: the header, staging's exact read after the fast scan gave up, a shard read as a
slot reads it; and a job staged with one fails before it holds any GPU, the reason on its page."""

import csv
import io

import pytest

from billing.models import LedgerEntry
from jobs.models import Job, State
from jobs.staging.formats import FormatError, detect, iter_records, open_quote_line
from tests.jobs.staging.reading import COMMAS, read
from tests.support import job_form, wait_for_end

NEVER_CLOSED = "a quote opened here is never closed."


def rows(first: int, count: int) -> bytes:
    return b"".join(b"%d,name %d,%d.5\n" % (n, n, n) for n in range(first, first + count))


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b'a,b\n1,2\n"3,4\n5,6\n', 3),
        (b'a,b\n1,"two\nlines"\n2,ok\n3,"x\ny","never\n\n4,5\n', 6),
        (b'a,b\n1,"say ""hi""\n2,3\n', 2),
        (b'a,b\n1,5\'11"\n2,"\n', 3),
        (b'a,b\r\n1,2\r\n\r\n3,"\r\n', 4),
        (b'a,"b\n1,2\n', 1),
    ],
    ids=["own line", "after a closed multi-line field", "doubled quotes", "inch mark first", "crlf", "header"],
)
def test_it_names_the_line_where_the_unclosed_quote_opened(data, line):
    with pytest.raises(FormatError) as raised:
        read(data, COMMAS)
    assert str(raised.value) == f"Line {line}: {NEVER_CLOSED}"


@pytest.mark.parametrize("name", ["data.txt", "data.csv"])
def test_an_unclosed_quote_in_the_first_bytes_does_not_hide_that_it_is_csv(name):
    data = b'a;b\n1;2\n"3;4\n5;6\n'
    assert detect(data, at_eof=True, name=name) == {"format": "csv", "delimiter": ";", "quotechar": '"'}
    with pytest.raises(FormatError, match=f"^Line 3: {NEVER_CLOSED}$"):
        read(data)


@pytest.mark.parametrize("after", [0, 3], ids=["at the end of the data", "at the end of the shard"])
def test_it_names_it_in_a_shard_read_as_a_slot_reads_it(after):
    shard = b'6,name 6,6.5\n11,"never closed,1.5\n12,name 12,12.5\n'
    data = b"id,name,amount\n" + rows(1, 5) + shard + rows(13, after)
    start = len(b"id,name,amount\n" + rows(1, 5))
    layout = {**COMMAS, "columns": ["id", "name", "amount"]}
    stream = io.BytesIO(data[start:])  # the data past the shard too, as staging reads it
    records = iter_records(stream, layout, start=start, end=start + len(shard), first_position=6, first_line=7)
    with pytest.raises(FormatError, match=f"^Line 8: {NEVER_CLOSED}$"):
        list(records)


def test_a_quote_left_open_past_the_field_limit_says_so():
    previous = csv.field_size_limit(1000)
    try:
        data = b"id,name,amount\n" + rows(1, 3) + b'4,"never closed,1.5\n' + rows(5, 200)
        with pytest.raises(FormatError) as raised:
            read(data, COMMAS)
        assert str(raised.value) == "Line 5: a quote opened here is not closed within 1,000 characters."
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


@pytest.mark.django_db(transaction=True)
def test_a_job_with_an_unclosed_quote_fails_staging_naming_its_line(fleet, partner_client):
    data = b"id,name,amount\n" + rows(1, 50_000) + b'50001,"never closed,1.5\n' + rows(50_002, 100)
    partner_client.post("/jobs/new/", job_form(data, name="quote.csv"))
    job = wait_for_end(Job.objects.get())
    assert job.state == State.FAILED
    assert job.error == f"Staging failed: Line 50002: {NEVER_CLOSED}"
    assert not job.allocations.exists()
    assert not LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD).exists()
    assert f"Line 50002: {NEVER_CLOSED}" in partner_client.get(f"/jobs/{job.pk}/").content.decode()
