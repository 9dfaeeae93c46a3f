"""A job whose staging streams into its pass, on its page in a real browser (Chromium): running on the shards
staged while 40 % of the data is, staging and the pass on one card, read at 1280 px and 390 px in light and dark
(tests/screens.py). With E31_SCREENSHOTS set it is shot there (docs/screenshots/job-streaming*.png)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import lifecycle
from jobs.models import Gpu, Job, Node, Shard, State
from tests.factories import make_job
from tests.screens import look
from tests.support import logged_in_page, needs_chromium

pytestmark = [pytest.mark.django_db(transaction=True), needs_chromium]
RECORDS = 2_500


def streaming_job(organisation) -> Job:
    """A job on two GPUs, 40 % of its 1 GB staged: four shards done, two running, two staged and waiting."""
    seen = timezone.now() + timedelta(days=1)
    node = Node.objects.create(name="gpu-box-1", hostname="gpu-box-1", last_seen=seen)
    slots = [
        Gpu.objects.create(
            node=node, index=i, kind=Gpu.Kind.GPU, name="NVIDIA H100 80GB HBM3", queue=f"slot.gpu-box-1.{i}",
            last_seen=seen, utilisation=88,
        )
        for i in range(2)
    ]  # fmt: skip
    job = make_job(organisation, State.QUEUED, work="test-slow-echo", source_name="events.csv.gz", gpus=2)
    Job.objects.filter(pk=job.pk).update(
        layout={"format": "csv", "columns": ["n", "text"], "expected_records": 8 * RECORDS * 5 // 2},
        streaming=True, stream_ready=True, records_total=None, staging_phase="downloading", staging_total=10**9,
        staging_done=4 * 10**8,
        staging_phase_started=timezone.now() - timedelta(seconds=40),
    )  # fmt: skip
    lifecycle.start_hold(job, slots)
    now = timezone.now()
    for index in range(8):
        status = Shard.Status.DONE if index < 4 else Shard.Status.RUNNING if index < 6 else Shard.Status.PENDING
        Shard.objects.create(
            job=job, index=index, first_record=index * RECORDS + 1, record_count=RECORDS,
            first_line=index * RECORDS + 2, start_byte=index * 50_000_000, end_byte=(index + 1) * 50_000_000,
            status=status,
            started_at=now - timedelta(seconds=30 - 5 * index) if index < 6 else None,
            finished_at=now - timedelta(seconds=28 - 5 * index) if index < 4 else None,
        )  # fmt: skip
    return job


def test_a_streaming_job_reads_as_running_with_the_share_of_its_data_staged(
    browser, live_server, partner, organisation, rate_card
):
    job = streaming_job(organisation)
    page = logged_in_page(browser, live_server.url)
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    text = page.inner_text("#progress")
    assert "Running — 40 % of the data staged; shards run as it arrives." in text
    assert "so far, of a total known once the data is staged" in text
    assert page.locator("progress.bar.staging").get_attribute("value") == "40"
    assert page.locator("progress.bar.running").get_attribute("value") == "20", (
        "of the records the data's size suggests"
    )
    bars = ("Data staged", "Records done")
    named = {bar: page.get_by_role("progressbar", name=bar).get_attribute("value") for bar in bars}
    assert named == {"Data staged": "40", "Records done": "20"} and all(bar in text for bar in bars), (
        "each bar is named by the words written beside it"
    )
    look(page, "job-streaming")
