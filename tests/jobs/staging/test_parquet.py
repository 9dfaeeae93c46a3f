"""Parquet datasets: staged, cut into row ranges that cross row groups, cleaned with their types, and
every row accounted for in the output; a broken file fails staging with a clear reason."""

import csv
import io
from datetime import UTC, date, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.models import Job, State
from jobs.staging import parquet
from jobs.staging.formats import FormatError
from tests.support import OutputZip, job_form, wait_for_end

ROWS = 5_000


def table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(1, ROWS + 1), pa.int64()),
            "score": pa.array([None if n % 10 == 0 else n / 4 for n in range(ROWS)], pa.float64()),
            "active": pa.array([n % 2 == 0 for n in range(ROWS)]),
            "day": pa.array([date(2026, 1, 1 + n % 28) for n in range(ROWS)]),
            "seen": pa.array(
                [datetime(2026, 3, 1, n % 24, tzinfo=UTC) for n in range(ROWS)], pa.timestamp("us", "UTC")
            ),
            # Text that is a number except in one row of each 1,000: that row is rejected, named.
            "code": pa.array([f"  {n} " if n % 1000 != 999 else "n/a" for n in range(ROWS)]),
            "tags": pa.array([["a", str(n)] for n in range(ROWS)]),
        }
    )


def parquet_bytes(source: pa.Table, row_group_size: int = 700) -> bytes:
    sink = io.BytesIO()
    pq.write_table(source, sink, row_group_size=row_group_size)
    return sink.getvalue()


def test_it_reads_any_row_range_across_row_groups():
    data = parquet_bytes(table())
    layout = parquet.describe(io.BytesIO(data))
    assert layout["columns"] == table().column_names
    assert sum(layout["row_groups"]) == ROWS and len(layout["row_groups"]) == 8
    rows = list(parquet.iter_rows(io.BytesIO(data), layout, first_position=650, count=800))
    assert [row.position for row in rows] == list(range(650, 1450))
    assert [row.value["id"] for row in rows] == list(range(650, 1450))
    assert rows[0].line == 650


@pytest.mark.parametrize(
    "data",
    [b"PAR1" + b"\x00" * 100, parquet_bytes(table())[:-200], b"PAR1 this is no parquet PAR1"],
    ids=["zeros", "cut-off", "text"],
)
def test_it_refuses_a_broken_parquet_file(data):
    with pytest.raises(FormatError, match="This is not a readable Parquet file"):
        parquet.describe(io.BytesIO(data))


@pytest.mark.django_db(transaction=True)
def test_a_parquet_dataset_runs_end_to_end(fleet, partner_client):
    response = partner_client.post("/jobs/new/", job_form(parquet_bytes(table()), name="events.parquet"))
    assert response.status_code == 302
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    assert (job.input_format, job.records_total) == ("parquet", ROWS)
    assert job.shards.count() > 1
    assert any((shard.first_record - 1) % 700 for shard in job.shards.all()), "shards cut inside row groups"
    types = {column["name"]: column["type"] for column in job.plan["columns"]}
    assert types == {
        "id": "int", "score": "float", "active": "bool", "day": "date", "seen": "datetime", "code": "int",
        "tags": "string",
    }  # fmt: skip

    archive = OutputZip(partner_client, job)
    output = pq.read_table(io.BytesIO(archive.read("output.parquet")))
    rejects = list(csv.DictReader(io.StringIO(archive.read("rejects.csv").decode())))
    assert [int(row["record"]) for row in rejects] == [1000, 2000, 3000, 4000, 5000]
    assert rejects[0]["line"] == "1000" and "column 'code': 'n/a' is not an int" in rejects[0]["reason"]
    assert '"code": "n/a"' in rejects[0]["raw"]
    assert output.num_rows == ROWS - 5
    first = output.slice(0, 1).to_pylist()[0]
    assert first["_record"] == 1 and first["id"] == 1 and first["code"] == 0 and first["score"] is None
    assert first["day"] == date(2026, 1, 1) and first["seen"] == datetime(2026, 3, 1, 0, tzinfo=UTC)
    assert first["tags"] == '["a", "0"]'
