"""The charts' histories through a real gpuworker: a pass's page draws the records its shards did, and beat's
task samples the node and the queue on the control worker."""

import pytest

from jobs.models import Job, NodeSample, QueueSample, State
from portal.celery import app
from tests.jobs.pages.test_job_charts import charts_of
from tests.jobs.test_charts import plotted
from tests.support import job_form, wait_for, wait_for_end

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_pass_draws_the_records_its_shards_did(fleet, partner_client, rate_card):
    assert partner_client.post("/jobs/new/", job_form()).status_code == 302
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED
    svgs = charts_of(partner_client.get(f"/jobs/{job.pk}/").content.decode())
    done = plotted(svgs["Records done"], "Records done")
    assert done[0][1] == 0 and abs(done[-1][1] - job.records_total) <= job.records_total / 1000
    assert job.started_at <= done[-1][0]
    assert "CPU slots held and used" in svgs


def test_beat_samples_the_node_and_the_queue(fleet):
    app.send_task("jobs.tasks.sample_fleet")
    wait_for(
        lambda: (
            NodeSample.objects.filter(node__name=fleet.name, slots=fleet.slots).exists()
            and QueueSample.objects.exists()
        ),
        what="the control worker's sample of the fleet",
    )
