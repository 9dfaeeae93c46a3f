"""A worker process killed with SIGKILL in the middle of a shard: the shard is done again, the job
still succeeds, and its output holds every record exactly once."""

import pyarrow.parquet as pq
import pytest
from django.core.files.storage import default_storage

from jobs.models import Job, Shard, State
from tests.datasets import csv_bytes
from tests.support import job_form, kill_when, wait_for_end

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

ROWS = 2000


def test_it_processes_the_shard_again_after_sigkill(fleet, partner_client):
    form = job_form(csv_bytes(ROWS), name="numbers.csv", work="test-slow-echo")
    form["param-test-slow-echo-seconds_per_batch"] = "0.15"
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = Job.objects.get()

    def running(pids=None):
        shards = Shard.objects.filter(job=job, status=Shard.Status.RUNNING, worker_pid__isnull=False)
        return shards.filter(worker_pid__in=pids).first() if pids else shards.first()

    victim = kill_when(
        lambda: [shard.worker_pid] if (shard := running()) else [], running, what="a shard to start running"
    )

    wait_for_end(job, timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    victim.refresh_from_db()
    assert victim.attempts >= 2, "the killed shard was claimed again"
    assert victim.status == Shard.Status.DONE

    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        table = pq.read_table(output)
    assert table.column("_record").to_pylist() == list(range(1, ROWS + 1))
    assert table.column("text").to_pylist() == [f"record {n}" for n in range(1, ROWS + 1)]
