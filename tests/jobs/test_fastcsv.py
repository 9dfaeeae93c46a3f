"""Staging's fast CSV read agrees with the exact read: the same record count, shards that a slot
reads back record for record, the same column types; and what it cannot vouch for, it leaves to the
exact read, which names the line."""

import io
import re

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from jobs import processors
from jobs.models import Job, State
from jobs.staging import fastcsv, stage
from jobs.staging.formats import FormatError, iter_records
from jobs.staging.progress import StagingProgress
from tests.conftest import EXAMPLE

pytestmark = pytest.mark.django_db

HEADER = b"id,name,score,day\n"


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
    "a record longer than a block": HEADER + rows(300) + b'7,"' + b"long line\n" * 20_000 + b'",1.5,2026-01-01\n',
}


def job_for(organisation) -> Job:
    return Job.objects.create(
        organisation=organisation,
        work="clean-table",
        params=processors.get("clean-table").validate_params({}),
        source_name="data.csv",
        gpus=2,
        hours=1,
        state=State.STAGING,
    )


def described(job: Job, data: bytes, monkeypatch=None, exact: bool = False):
    if exact:
        monkeypatch.setattr(fastcsv, "read", _unsure)
    path = default_storage.save("test-fastcsv/data.csv", ContentFile(data))
    try:
        return stage.describe_and_cut(job, path, StagingProgress(job.pk, job.staging_claim))
    finally:
        default_storage.delete(path)
        if exact:
            monkeypatch.undo()


def _unsure(*args, **kwargs):
    raise fastcsv.Unsure


@pytest.mark.parametrize("name", list(DATASETS))
def test_the_fast_read_agrees_with_the_exact_read(organisation, monkeypatch, name):
    monkeypatch.setattr(fastcsv, "MIN_BLOCK", 1024)  # many blocks, even for small data
    data = DATASETS[name]
    job = job_for(organisation)
    layout, plan, total, shards = described(job, data)
    fast_total, _ = fastcsv.read(
        io.BytesIO(data), layout, layout["data_offset"], shards[0]["first_line"] - 1, len(data), None, lambda done: None
    )
    assert fast_total == total, "the fast read took this dataset"
    exact_layout, exact_plan, exact_total, _ = described(job, data, monkeypatch, exact=True)
    assert total == exact_total
    assert plan == exact_plan
    assert layout["columns"] == exact_layout["columns"]
    assert len(shards) > 1
    position = 1
    for shard in shards:  # each shard, read back as a slot reads it, holds exactly its records
        assert shard["first_record"] == position
        records = list(
            iter_records(
                io.BytesIO(data[shard["start_byte"] : shard["end_byte"]]),
                layout,
                start=shard["start_byte"],
                end=shard["end_byte"],
                first_position=shard["first_record"],
                first_line=shard["first_line"],
            )
        )
        assert [record.position for record in records] == list(range(position, position + shard["record_count"]))
        position += shard["record_count"]
    assert position == total + 1


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (HEADER + rows(3000) + b"5,height 5'11\",3.5,2026-01-01\n" + rows(10), None),
        (HEADER + rows(3000) + b'5,a "quoted" word,3.5,2026-01-01\n' + rows(10), None),
        (HEADER + rows(3000) + b"5,carriage\rreturn,3.5,2026-01-01\n", "Line 3002:"),
        (HEADER + rows(3000) + b"5,caf\xe9,3.5,2026-01-01\n", "Line 3002 is not UTF-8 text (byte 0xe9)."),
        (HEADER + rows(3000) + b'5,"never closed,3.5,2026-01-01\n' + rows(5), "Line 3002:"),
    ],
    ids=["inch mark", "quotes mid-field", "lone carriage return", "latin-1 byte", "unmatched quote"],
)
def test_what_the_fast_read_cannot_vouch_for_goes_the_exact_way(organisation, monkeypatch, data, error):
    monkeypatch.setattr(fastcsv, "MIN_BLOCK", 1024)
    job = job_for(organisation)
    assert len(data) > fastcsv.BLOCKS_PER_FILE * fastcsv.MIN_BLOCK, "large enough for the fast read to try"
    layout = {"format": "csv", "delimiter": ",", "quotechar": '"', "columns": ["id", "name", "score", "day"]}
    with pytest.raises(fastcsv.Unsure):
        fastcsv.read(io.BytesIO(data), layout, len(HEADER), 1, len(data), None, lambda done: None)
    if error:
        with pytest.raises(FormatError, match=re.escape(error)):
            described(job, data)
    else:
        _, _, total, _ = described(job, data)
        assert total == 3011
