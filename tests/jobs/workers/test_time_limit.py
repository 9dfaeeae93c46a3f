"""A job whose shards run past its time limit: its slots stop it at the limit (within a batch, not
at beat's next look), the GPUs are released and the meter stops at the limit, and the finished
shards are kept as a partial output."""

import json
from datetime import timedelta

import pytest
from django.core.files.storage import default_storage

from billing.models import LedgerEntry
from jobs.models import Job, Shard, State
from tests.datasets import csv_bytes
from tests.support import job_form, wait_for, wait_for_end

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = timedelta(hours=0.01)  # 36 s, the shortest a job can ask for
BATCH_SECONDS = 4.0  # test-slow-echo: 50 records a batch; 1,000 records need 80 s of work, 40 s on 2 slots


def test_a_job_past_its_time_limit_stops_there_and_keeps_what_finished(fleet, partner_client):
    form = job_form(csv_bytes(1000), name="numbers.csv", work="test-slow-echo", hours="0.01", request_kind="fixed")
    form["param-test-slow-echo-seconds_per_batch"] = str(BATCH_SECONDS)
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=120)

    assert job.state == State.TIMED_OUT
    assert job.error == "The job ran past its 0.01 h limit."
    for allocation in job.allocations.all():
        assert allocation.held_to - allocation.held_from == LIMIT, "held until the limit, not until it was noticed"
    entry = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.HOLD)
    assert (entry.gpus, entry.seconds) == (2, LIMIT.total_seconds())
    assert job.ended_at >= job.started_at + LIMIT

    done = job.shards.filter(status=Shard.Status.DONE)
    assert done.exists() and job.shards.exclude(status=Shard.Status.DONE).exists()
    assert not job.shards.filter(status=Shard.Status.RUNNING).exists(), "the shards running at the limit stopped"
    wait_for(lambda: Job.objects.get(pk=job.pk).output_path, timeout=30, what="the partial output")
    job.refresh_from_db()
    with default_storage.open(f"{job.output_path}/manifest.json") as handle:
        manifest = json.load(handle)
    assert manifest["complete"] is False and manifest["state"] == State.TIMED_OUT
    assert manifest["records"]["out"] == sum(shard.record_count for shard in done)
