"""The operators' overview of the fleet and the queue in a real browser (Chromium): at 390 px nothing sticks out
sideways and no cell lies off the screen (its tables stack into a card per row), at 1280 px no box scrolls
sideways (tests/screens.py). With E31_SCREENSHOTS set it is shot there (docs/screenshots/overview*.png)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs.models import Allocation, Gpu, Job, Node, Shard, State
from portal.models import Organisation
from tests.api.support import entry
from tests.factories import make_job
from tests.screens import look
from tests.support import logged_in_page, needs_chromium

pytestmark = [pytest.mark.django_db(transaction=True), needs_chromium]


def a_busy_fleet() -> None:
    """Two nodes of four GPUs and one offline; three organisations, one over its quota, with jobs running on
    them, narrower than asked and flexible, and a queue with a job on hold and one with a deadline."""
    now = timezone.now()
    seen = now + timedelta(days=1)
    slots = []
    for name, online in (("gpu-box-1", True), ("gpu-box-2", True), ("gpu-box-3.long-hostname.example", False)):
        node = Node.objects.create(name=name, hostname=name, last_seen=seen if online else now - timedelta(hours=2))
        slots += [
            Gpu.objects.create(
                node=node, index=i, kind=Gpu.Kind.GPU, name="NVIDIA H100 80GB HBM3", queue=f"slot.{name}.{i}",
                last_seen=seen if online else None, utilisation=[91, 78, 12, None][i],
            )
            for i in range(4)
        ]  # fmt: skip
    lab = Organisation.objects.create(name="Partner Lab", slug="lab", max_slots_held=4, monthly_spend_cap=500)
    other = Organisation.objects.create(name="Other Lab", slug="other", max_slots_held=2, share_weight=2)
    long = Organisation.objects.create(name="Northwind Genomics Research Consortium", slug="northwind")
    entry(make_job(lab, State.SUCCEEDED), ended=now, amount="234.5")
    for n, (organisation, gpus, taken, request) in enumerate(
        [(lab, 4, 4, Job.Request.FIXED), (other, 2, 3, Job.Request.FLEXIBLE), (long, 2, 1, Job.Request.FIXED)]
    ):
        job = make_job(
            organisation, State.RUNNING, work="embed-text", gpus=gpus, hours=3, request=request, max_gpus=4,
            started_at=now - timedelta(minutes=40), records_total=1_200_000, expected_finish=now + timedelta(hours=1),
        )  # fmt: skip
        for _ in range(taken):
            Allocation.objects.create(job=job, gpu=slots.pop(0), held_from=job.started_at)
        for index in range(6):
            status = Shard.Status.DONE if index < 2 + n else Shard.Status.RUNNING
            Shard.objects.create(
                job=job, index=index, first_record=index * 200_000 + 1, record_count=200_000, status=status,
                first_line=index * 200_000 + 2, start_byte=index, end_byte=index + 1, records_done=75_000,
            )  # fmt: skip
    for n in range(6):
        make_job(
            [lab, other, long][n % 3], State.QUEUED, work="embed-text", gpus=1 + n % 4, hours=Decimal("1.5"),
            queued_at=now - timedelta(minutes=30 - n), deadline=now + timedelta(hours=6) if n == 1 else None,
            expected_start=now + timedelta(minutes=20 * n) if n != 2 else None,
            on_hold_since=now if n == 2 else None, on_hold_reason="quota review" if n == 2 else "",
        )  # fmt: skip


def test_the_overview_reads_on_a_phone_and_a_laptop(browser, live_server, operator):
    a_busy_fleet()
    page = logged_in_page(browser, live_server.url, "operator", "pw-operator")
    page.goto(f"{live_server.url}/admin/jobs/job/overview/")
    assert page.locator("tr.over").count() == 1, "the organisation over its quota"
    look(page, "overview")
