"""Jobs that cannot succeed end `failed` with the reason on their page, and hold nothing afterwards."""

import csv
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.storage import default_storage

from billing.models import LedgerEntry
from jobs.models import Job, Shard, State
from jobs.workers.node import process_runs
from tests.datasets import csv_bytes
from tests.support import job_form, wait_for_end

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_fails_staging_on_bad_bytes_past_the_first_look_and_holds_nothing(fleet, partner_client):
    good = b"".join(b"%d,plain text\n" % n for n in range(1, 8000))
    data = b"id,text\n" + good + b"8000,caf\xe9\n"
    assert len(good) > 64 * 1024, "the bad byte lies past the sample the form reads"
    partner_client.post("/jobs/new/", job_form(data, name="late.csv"))
    job = wait_for_end(Job.objects.get())
    assert job.state == State.FAILED
    assert job.error == "Staging failed: Line 8001 is not UTF-8 text (byte 0xe9)."
    assert not job.allocations.exists()
    assert not LedgerEntry.objects.filter(job=job).exists()
    assert "Line 8001 is not UTF-8 text" in partner_client.get(f"/jobs/{job.pk}/").content.decode()


def test_it_fails_staging_on_an_unmatched_quote_in_the_header_with_its_line(fleet, partner_client):
    data = b'id,"text\n1,fine\n2,more\n'
    partner_client.post("/jobs/new/", job_form(data, name="quote.csv"))
    job = wait_for_end(Job.objects.get())
    assert job.state == State.FAILED
    assert job.error == "Staging failed: Line 1: a quote opened here is never closed."


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("header.csv", "The file holds no records (a header or a schema alone): a dataset needs at least one."),
        ("rowless.parquet", "The Parquet file has no rows."),
    ],
)
def test_it_fails_staging_of_a_file_with_no_records_saying_so(fleet, partner_client, name, error):
    data = b"id,text\n"
    if name.endswith(".parquet"):
        out = io.BytesIO()
        pq.write_table(pa.table({"id": pa.array([], pa.int64()), "text": pa.array([], pa.string())}), out)
        data = out.getvalue()
    partner_client.post("/jobs/new/", job_form(data, name=name))
    job = wait_for_end(Job.objects.get())
    assert (job.state, job.error) == (State.FAILED, f"Staging failed: {error}")
    assert not job.allocations.exists()


def test_it_stops_retrying_a_poison_shard_and_fails_the_job(fleet, partner_client):
    form = job_form(csv_bytes(1000), name="numbers.csv", work="test-slow-echo")
    form["param-test-slow-echo-seconds_per_batch"] = "0"
    form["param-test-slow-echo-fail_at_record"] = "600"
    partner_client.post("/jobs/new/", form)
    job = wait_for_end(Job.objects.get())
    assert job.state == State.FAILED
    poison = Shard.objects.get(job=job, first_record__lte=600, first_record__gt=600 - 250)
    assert poison.attempts == 3
    assert job.error == f"Shard {poison.index} failed 3 times: RuntimeError: record 600 is poison"
    assert not job.allocations.filter(held_to__isnull=True).exists()
    assert LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD).exists(), "the hours held are on the ledger"


def test_a_slot_whose_device_broke_hands_its_hold_to_a_fresh_process_which_finishes_the_job(
    fleet, partner_client, tmp_path
):
    """A CUDA error stays with its process: every later call there fails. The slot gives the shard back,
    and its process ends with the hold handed over; the fresh one its worker starts runs the rest."""
    form = job_form(csv_bytes(2000), name="numbers.csv", work="test-slow-echo", gpus="1")
    form["param-test-slow-echo-seconds_per_batch"] = "0"
    form["param-test-slow-echo-device_fault_at_record"] = "600"
    form["param-test-slow-echo-device_fault_marker"] = str(tmp_path / "faulted")
    partner_client.post("/jobs/new/", form)
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    assert job.records_out == 2000
    broken = Shard.objects.get(job=job, first_record__lte=600, first_record__gt=600 - 250)
    assert broken.attempts == 2
    before = set(Shard.objects.filter(job=job, index__lt=broken.index).values_list("worker_pid", flat=True))
    after = set(Shard.objects.filter(job=job, index__gte=broken.index).values_list("worker_pid", flat=True))
    assert len(before) == len(after) == 1 and before != after, "the shards after it ran in a fresh process"
    assert not process_runs(before.pop()), "the broken process ended"
    assert job.allocations.count() == 1, "one hold throughout: handed over, never ended and held again"


def test_a_shard_that_fails_on_one_slot_is_retried_on_another(fleet, partner_client):
    form = job_form(csv_bytes(2000), name="numbers.csv", work="test-slow-echo")
    form["param-test-slow-echo-seconds_per_batch"] = "0.1"  # slot 1 alone would need 4 s: slot 0 gets a shard
    form["param-test-slow-echo-fail_on_slot"] = "0"
    partner_client.post("/jobs/new/", form)
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    shards = list(Shard.objects.filter(job=job).select_related("gpu", "failed_on"))
    assert {shard.gpu.index for shard in shards} == {1}, "every shard was finished on the slot that works"
    retried = [shard for shard in shards if shard.attempts > 1]
    assert retried and all(shard.failed_on.index == 0 and shard.attempts == 2 for shard in retried)
    assert job.records_out == 2000


def test_with_partial_output_allowed_a_poison_shard_is_left_out_and_its_records_rejected(fleet, partner_client):
    form = job_form(csv_bytes(1000), name="numbers.csv", work="test-slow-echo", allow_partial="on")
    form["param-test-slow-echo-seconds_per_batch"] = "0"
    form["param-test-slow-echo-fail_at_record"] = "600"
    partner_client.post("/jobs/new/", form)
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    poison = Shard.objects.get(job=job, first_record__lte=600, first_record__gt=600 - 250)
    assert (poison.status, poison.attempts) == (Shard.Status.FAILED, 3)
    assert job.records_out == 1000 - poison.record_count
    assert job.records_rejected == poison.record_count
    with default_storage.open(f"{job.output_path}/rejects.csv") as handle:
        rejects = list(csv.DictReader(io.StringIO(handle.read().decode())))
    first = poison.first_record
    assert [int(row["record"]) for row in rejects] == list(range(first, first + poison.record_count))
    assert rejects[0]["reason"] == f"shard {poison.index} failed 3 times: RuntimeError: record 600 is poison"
    assert rejects[0]["line"] == str(first + 1) and rejects[0]["raw"] == f"{first},record {first}"
    with default_storage.open(f"{job.output_path}/manifest.json") as handle:
        manifest = json.load(handle)
    assert manifest["complete"] is True
    assert manifest["failed_shards"] == [
        {
            "index": poison.index,
            "first_record": first,
            "records": poison.record_count,
            "attempts": 3,
            "error": "RuntimeError: record 600 is poison",
        }
    ]
    assert manifest["records"]["in_failed_shards"] == poison.record_count
    assert manifest["records"]["not_processed"] == 0
    assert "failed shard left out" in job.events.get(state=State.SUCCEEDED).message
