"""Several machines: two gpuworker processes, two nodes, one job held across both and finished by
both; its output holds every record once."""

import pyarrow.parquet as pq
import pytest
from django.core.files.storage import default_storage

from jobs.models import Job, Shard, State
from tests.datasets import csv_bytes
from tests.support import job_form, wait_for_end, wait_for_slots

pytestmark = pytest.mark.django_db(transaction=True)


def test_one_job_runs_across_two_nodes(two_nodes, partner_client):
    for node in two_nodes:
        wait_for_slots(node)
    form = job_form(csv_bytes(4000), name="numbers.csv", work="test-slow-echo", gpus="2")
    form["param-test-slow-echo-seconds_per_batch"] = "0.05"
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    held_on = set(job.allocations.values_list("gpu__node__name", flat=True))
    assert held_on == {node.name for node in two_nodes}, "one slot on each machine"
    worked_on = set(Shard.objects.filter(job=job).values_list("gpu__node__name", flat=True))
    assert worked_on == held_on, "both machines processed shards"
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        records = pq.read_table(output).column("_record").to_pylist()
    assert sorted(records) == list(range(1, 4001))
