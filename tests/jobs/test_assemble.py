"""Assembly stitches the shards' parts into one output without decoding them: every record once, in
input order, with the digest of the file as stored; an assembly killed half-way is run again and
leaves nothing of itself behind."""

import csv
import hashlib
import io
import json
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from jobs import processors, tasks
from jobs.models import Job, Shard, State
from jobs.outputs import REJECT_SCHEMA, output_schema
from jobs.outputs.stitch import StitchError, stitch
from tests.factories import make_job
from tests.support import manage, process_env

pytestmark = pytest.mark.django_db(transaction=True)

# Per shard: its records' row groups as (first position, count) and its rejected positions. Shard 2
# rejects every record: its part has no rows.
SHARDS = [
    ([(1, 40), (41, 40)], [81]),
    ([(82, 19)], []),
    ([], [101, 102, 103]),
    ([(104, 30), (134, 30), (164, 37)], [201]),
]
RECORDS = 201
REJECTED = [81, 101, 102, 103, 201]


def finishing_job(organisation, raw=lambda n: f"raw {n}") -> Job:
    """A test-slow-echo job whose last shard is done, each shard's part written as a slot writes it; `raw` gives
    a rejected record's text by its position."""
    job = make_job(
        organisation,
        State.FINISHING,
        work="test-slow-echo",
        params=processors.get("test-slow-echo").validate_params({}),
        layout={"format": "csv", "columns": ["text"]},
        records_total=RECORDS,
    )
    schema = output_schema(job)
    first = 1
    for index, (groups, rejected) in enumerate(SHARDS):
        kept = sum(count for _, count in groups)
        part = io.BytesIO()
        with pq.ParquetWriter(part, schema) as writer:
            for start, count in groups:
                positions = list(range(start, start + count))
                writer.write_table(pa.table([positions, [f"record {n}" for n in positions]], schema=schema))
            if not groups:
                writer.write_table(schema.empty_table())
        rejects = io.BytesIO()
        rows = {"record": rejected, "line": [n + 1 for n in rejected], "reason": ["bad"] * len(rejected)}
        pq.write_table(pa.table({**rows, "raw": [raw(n) for n in rejected]}, schema=REJECT_SCHEMA), rejects)
        base = f"{job.storage_prefix}/shards/{index:05d}-token"
        Shard.objects.create(
            job=job, index=index, first_record=first, record_count=kept + len(rejected), first_line=first + 1,
            start_byte=0, end_byte=10, status=Shard.Status.DONE, records_out=kept, records_rejected=len(rejected),
            output_path=default_storage.save(f"{base}.parquet", ContentFile(part.getvalue())),
            rejects_path=default_storage.save(f"{base}.rejects.parquet", ContentFile(rejects.getvalue())),
        )  # fmt: skip
        first += kept + len(rejected)
    return job


def stored(job: Job, name: str) -> bytes:
    with default_storage.open(f"{job.output_path}/{name}", "rb") as handle:
        return handle.read()


def test_it_stitches_every_record_once_in_input_order(organisation):
    job = finishing_job(organisation)
    assert tasks.assemble(job.pk) is True
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED, job.error

    output = stored(job, "output.parquet")
    table = pq.read_table(io.BytesIO(output))
    kept = [n for n in range(1, RECORDS + 1) if n not in REJECTED]
    assert table.column("_record").to_pylist() == kept
    assert table.column("text").to_pylist() == [f"record {n}" for n in kept]
    assert pq.ParquetFile(io.BytesIO(output)).metadata.num_row_groups == 7, "each part's row groups, as written"
    rejects = list(csv.DictReader(io.StringIO(stored(job, "rejects.csv").decode())))
    assert [int(row["record"]) for row in rejects] == REJECTED
    manifest = json.loads(stored(job, "manifest.json"))
    assert manifest["files"]["output.parquet"] == {"bytes": len(output), "sha256": hashlib.sha256(output).hexdigest()}
    assert manifest["records"] == {"in": 201, "out": 196, "rejected": 5, "in_failed_shards": 0, "not_processed": 0}
    assert not any(default_storage.exists(shard.output_path) for shard in job.shards.all()), "the parts are gone"


def test_a_rejects_text_that_a_spreadsheet_would_run_is_guarded_and_a_number_stays(organisation):
    texts = {81: "=cmd|' /C calc'!A0", 101: "@SUM(1+1)*cmd", 102: "-2+3", 103: "-5", 201: "plain, quoted"}
    job = finishing_job(organisation, raw=texts.get)
    assert tasks.assemble(job.pk) is True
    job.refresh_from_db()
    rejects = list(csv.DictReader(io.StringIO(stored(job, "rejects.csv").decode())))
    assert [row["raw"] for row in rejects] == ["'=cmd|' /C calc'!A0", "'@SUM(1+1)*cmd", "'-2+3", "-5", "plain, quoted"]


def test_parts_it_cannot_stitch_are_encoded_again_and_every_record_still_lands_once(organisation, caplog):
    """A part written by a slot of another version (here, with a page index) is not refused: the parts are
    decoded and encoded again, as before stitching."""
    job = finishing_job(organisation)
    shard = job.shards.get(index=1)
    with default_storage.open(shard.output_path, "rb") as handle:
        table = pq.read_table(handle)
    default_storage.delete(shard.output_path)
    rewritten = io.BytesIO()
    pq.write_table(table, rewritten, write_page_index=True)
    default_storage.save(shard.output_path, ContentFile(rewritten.getvalue()))

    assert tasks.assemble(job.pk) is True
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED, job.error
    output = stored(job, "output.parquet")
    kept = [n for n in range(1, RECORDS + 1) if n not in REJECTED]
    assert pq.read_table(io.BytesIO(output)).column("_record").to_pylist() == kept
    manifest = json.loads(stored(job, "manifest.json"))
    assert manifest["files"]["output.parquet"] == {"bytes": len(output), "sha256": hashlib.sha256(output).hexdigest()}
    assert "its parts are encoded again, they cannot be stitched: a column chunk has a page index" in caplog.text


def test_it_assembles_again_after_an_assembly_killed_half_way(organisation):
    job = finishing_job(organisation)
    # The control worker dies (SIGKILL) once the first output file is in storage, before the job is told.
    killed = subprocess.run(
        manage("shell", "-c", KILLED_AFTER_THE_FIRST_FILE.format(job=job.pk)),
        env=process_env(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr.decode()
    job.refresh_from_db()
    assert (job.state, job.output_path) == (State.FINISHING, "")
    left, _ = default_storage.listdir(job.storage_prefix)
    assert len([folder for folder in left if folder.startswith("output-")]) == 1, "the killed attempt's file"

    assert tasks.assemble(job.pk) is True
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED, job.error
    table = pq.read_table(io.BytesIO(stored(job, "output.parquet")))
    assert table.column("_record").to_pylist() == [n for n in range(1, RECORDS + 1) if n not in REJECTED]
    folders, _ = default_storage.listdir(job.storage_prefix)
    assert [folder for folder in folders if folder.startswith("output-")] == [job.output_path.rsplit("/", 1)[1]]
    assert tasks.assemble(job.pk) is False, "a second run counts for nothing"


KILLED_AFTER_THE_FIRST_FILE = """
import os, signal
from django.core.files.storage import default_storage
from jobs.outputs.assemble import assemble
save = default_storage.save
def save_then_die(*args, **kwargs):
    save(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
default_storage.save = save_then_die
assemble({job})
"""


def test_it_refuses_parts_whose_schemas_differ():
    parts = []
    for schema in (pa.schema([("a", pa.int64())]), pa.schema([("a", pa.string())])):
        part = io.BytesIO()
        pq.write_table(schema.empty_table(), part)
        parts.append(io.BytesIO(part.getvalue()))
    with pytest.raises(StitchError, match="schema"):
        stitch(parts, io.BytesIO())


def test_it_refuses_a_part_with_a_page_index_it_cannot_move():
    part = io.BytesIO()
    pq.write_table(pa.table({"a": [1, 2, 3]}), part, write_page_index=True)
    with pytest.raises(StitchError, match="page index"):
        stitch([io.BytesIO(part.getvalue())], io.BytesIO())


def test_it_refuses_what_is_not_parquet():
    with pytest.raises(StitchError, match="not a Parquet file"):
        stitch([io.BytesIO(b"record,line\n1,2\n3,4\n")], io.BytesIO())


def test_it_stitches_parts_of_every_kind_of_column_as_pyarrow_wrote_them():
    schema = pa.schema(
        [("n", pa.int64()), ("text", pa.string()), ("x", pa.float64()), ("flag", pa.bool_()),
         ("at", pa.timestamp("us", tz="UTC")), ("tags", pa.list_(pa.string())), ("blob", pa.binary())]
    )  # fmt: skip
    tables, parts = [], []
    for sizes in ([3, 70_000], [], [1], [20, 0, 5]):
        part = io.BytesIO()
        with pq.ParquetWriter(part, schema) as writer:
            for size in sizes:
                table = pa.table(
                    [list(range(size)), [None if n % 7 == 0 else "é" * (n % 5) for n in range(size)],
                     [n / 3 for n in range(size)], [n % 2 == 0 for n in range(size)],
                     pa.array(range(size), pa.timestamp("us", tz="UTC")), [[str(n)] * (n % 3) for n in range(size)],
                     [bytes([n % 256]) for n in range(size)]],
                    schema=schema,
                )  # fmt: skip
                tables.append(table)
                writer.write_table(table)
        parts.append(io.BytesIO(part.getvalue()))
    out = io.BytesIO()
    written = stitch(parts, out)
    assert written == {"bytes": len(out.getvalue()), "sha256": hashlib.sha256(out.getvalue()).hexdigest()}
    stitched = pq.ParquetFile(io.BytesIO(out.getvalue()))
    assert stitched.read().equals(pa.concat_tables(tables))
    assert [stitched.read_row_group(i).num_rows for i in range(stitched.num_row_groups)] == [3, 70_000, 1, 20, 0, 5]
