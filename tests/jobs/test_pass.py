"""A dataset pass end to end: upload in the browser, real broker and worker processes, the output
compared with the input record by record, and the ledger entry checked against the hold."""

import csv
import io
import itertools
import json
import math
import zipfile
from datetime import UTC
from decimal import Decimal

import pyarrow.parquet as pq
import pytest
from django.core.files.storage import default_storage

from billing.models import LedgerEntry
from jobs.models import Allocation, Job, State
from tests.support import EXAMPLE, OutputZip, job_form, wait_for, wait_for_end

HOLD = LedgerEntry.Kind.HOLD

pytestmark = pytest.mark.django_db(transaction=True)


def input_rows() -> list[dict]:
    with EXAMPLE.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_it_runs_a_pass_from_upload_to_output_and_ledger(fleet, partner_client, rate_card):
    response = partner_client.post("/jobs/new/", job_form(request_kind="fixed"))  # its two holds alike
    assert response.status_code == 302
    job = Job.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/"

    wait_for_end(job)
    assert job.state == State.SUCCEEDED, job.error

    archive = OutputZip(partner_client, job)
    assert sorted(archive.names) == ["manifest.json", "output.parquet", "rejects.csv"]
    table = pq.read_table(io.BytesIO(archive.read("output.parquet")))
    rejects = list(csv.DictReader(io.StringIO(archive.read("rejects.csv").decode())))

    rows = input_rows()
    out = table.to_pylist()
    positions = [row["_record"] for row in out] + [int(row["record"]) for row in rejects]
    assert sorted(positions) == list(range(1, len(rows) + 1)), "every record exactly once"
    assert [row["_record"] for row in out] == sorted(row["_record"] for row in out), "input order kept"
    for row in out:
        source = rows[row["_record"] - 1]
        assert row["id"] == int(source["id"])
        assert row["email"] == source["email"].strip()
        assert row["country"] == source["country"]
        assert row["active"] == (source["active"] == "true")
        expected_value = source["lifetime_value"].strip()
        assert row["lifetime_value"] == (float(expected_value) if expected_value else None)
        assert row["signup_date"].isoformat() == source["signup_date"]
        assert row["notes"] == (source["notes"].strip() or None)
    assert {row["reason"] for row in rejects} == {
        "expected 9 fields, found 8",
        "column 'lifetime_value': 'n/a' is not a float",
    }
    assert str(table.schema.field("last_seen").type) == "timestamp[us, tz=UTC]"

    entry = LedgerEntry.objects.get(job=job, kind=HOLD)
    held = Allocation.objects.filter(job=job)
    assert held.count() == 2 == entry.gpus
    assert all(a.held_from == entry.held_from and a.held_to == entry.held_to for a in held)
    assert entry.seconds == math.ceil((entry.held_to - entry.held_from).total_seconds())
    assert entry.gpu_hours == (Decimal(entry.gpus * entry.seconds) / 3600).quantize(Decimal("0.000001"))
    assert entry.rate == Decimal("3.60")
    assert entry.amount == (entry.gpu_hours * entry.rate).quantize(Decimal("0.0001"))
    billed = {line["kind"]: line for line in json.loads(archive.read("manifest.json"))["ledger"]}
    assert billed.keys() == {"staging", HOLD}, "the manifest carries what the job was billed"
    assert billed[HOLD]["held_from"] == entry.held_from.isoformat()
    assert billed[HOLD]["held_to"] == entry.held_to.isoformat()
    assert (billed[HOLD]["seconds"], billed[HOLD]["gpus"]) == (entry.seconds, 2)
    assert (billed[HOLD]["rate"], billed[HOLD]["amount"]) == ("3.6000", str(entry.amount))
    assert billed[HOLD]["hash"] == entry.hash

    dated = zipfile.ZipFile(io.BytesIO(b"".join(partner_client.get(f"/jobs/{job.pk}/output/").streaming_content)))
    job.refresh_from_db()
    ended = job.ended_at.astimezone(UTC)
    ended = ended.replace(second=ended.second - ended.second % 2)  # a zip keeps time to two seconds
    assert {info.date_time for info in dated.infolist()} == {ended.timetuple()[:6]}, "the zip dated at the job's end"
    for name in archive.names:
        alone = partner_client.get(f"/jobs/{job.pk}/output/{name}")
        assert alone["Content-Disposition"] == f'attachment; filename="job-{job.pk}-{name}"', "named as in the zip"

    job.refresh_from_db()
    assert job.records_out == len(out) and job.records_rejected == len(rejects)
    wait_for(lambda: Job.objects.get(pk=job.pk).staged_purged_at, timeout=10, what="the staged copy's purge")


def test_it_walks_the_lifecycle_without_skipping_or_reversing(fleet, partner_client):
    partner_client.post("/jobs/new/", job_form())
    job = wait_for_end(Job.objects.get())
    states = [state for state, _ in itertools.groupby(job.events.values_list("state", flat=True))]
    assert states == ["submitted", "staging", "queued", "running", "finishing", "succeeded"], "lines under one, alike"
    times = list(job.events.values_list("at", flat=True))
    assert times == sorted(times)
    running_at = job.events.filter(state=State.RUNNING).earliest("at").at
    for allocation in job.allocations.all():
        assert allocation.held_from >= running_at
        assert allocation.held_to <= job.events.get(state=State.FINISHING).at


def test_it_keeps_the_staged_copy_for_the_days_chosen(fleet, partner_client):
    partner_client.post("/jobs/new/", job_form(retention="keep", keep_days="3"))
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED
    assert job.retention_days == 3
    assert job.staged_purged_at is None
    assert default_storage.exists(job.staged_path)
