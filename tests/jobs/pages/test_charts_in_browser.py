"""The charts in a real browser (Chromium): a finished job's page and the operators' fleet page read at 1280 px and
at 390 px, in light and in dark mode, without the page scrolling sideways. With E31_SCREENSHOTS set, each is
saved there as a PNG (docs/screenshots/ keeps them). Needs Debian's `chromium`."""

import math
import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from jobs import history, lifecycle
from jobs.models import Allocation, Gpu, JobEvent, Node, NodeSample, QueueSample, Shard, State
from jobs.workers.nvml import Reading
from tests.factories import make_job
from tests.support import Watched, logged_in_page, needs_chromium

pytestmark = [pytest.mark.django_db(transaction=True), needs_chromium]

WIDTHS = (1280, 390)
FLEET = "/admin/jobs/job/fleet/"
SHARDS, RECORDS, SHARD_SECONDS = 12, 5_000, 50


@pytest.fixture
def gpu_slots(db):
    node = Node.objects.create(name="gpu-box-1", hostname="gpu-box-1", last_seen=timezone.now())
    return [
        Gpu.objects.create(
            node=node, index=i, kind=Gpu.Kind.GPU, name="NVIDIA H100 80GB HBM3", memory_mb=81_559,
            queue=f"slot.gpu-box-1.{i}", last_seen=timezone.now(),
        )
        for i in range(2)
    ]  # fmt: skip


def finished_job(organisation, slots) -> int:
    """A job of twelve shards on two GPUs, six each, one after another, the GPUs read every 10 s as a
    heartbeat reads them (jobs.history), busier in the middle of each shard."""
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=2, records_total=SHARDS * RECORDS)
    lifecycle.start_hold(job, slots)
    start = timezone.now() - timedelta(hours=1)
    Allocation.objects.filter(job=job).update(held_from=start)
    for index in range(SHARDS):
        began = start + timedelta(seconds=5 + SHARD_SECONDS * (index // 2) + 3 * (index % 2))
        Shard.objects.create(
            job=job, index=index, first_record=index * RECORDS + 1, record_count=RECORDS,
            first_line=index * RECORDS + 2, start_byte=index, end_byte=index + 1, status=Shard.Status.DONE,
            started_at=began, finished_at=began + timedelta(seconds=SHARD_SECONDS - 2 + index % 3),
        )  # fmt: skip
    end = start + timedelta(seconds=5 + SHARD_SECONDS * SHARDS // 2 + 5)
    for second in range(0, int((end - start).total_seconds()), 10):
        busy = [int(70 + 25 * math.sin(second / 15 + slot.index)) for slot in slots]
        readings = {slot.index: Reading(slot.index, busy[n], 30_000 + 150 * busy[n]) for n, slot in enumerate(slots)}
        history.record_readings(slots, readings, start + timedelta(seconds=second))
    Allocation.objects.filter(job=job).update(held_to=end)
    JobEvent.objects.filter(job=job).update(at=start)
    JobEvent.objects.create(job=job, state=State.FINISHING, at=end, message="all shards done; GPUs released")
    JobEvent.objects.create(job=job, state=State.SUCCEEDED, at=end + timedelta(seconds=2))
    job.state, job.started_at, job.ended_at = State.SUCCEEDED, start, end
    job.records_out, job.records_rejected = SHARDS * RECORDS - 12, 12
    job.save()
    return job.pk


def a_day_of_the_fleet(slots) -> None:
    """A day of minutes of the node: busy by day, quiet at night; and of the queue."""
    now = timezone.now().replace(second=0, microsecond=0)
    node = slots[0].node
    for minutes in range(24 * 60, -1, -1):
        at = now - timedelta(minutes=minutes)
        held = 2 if 300 < minutes < 900 else (1 if 900 <= minutes < 1100 else 0)
        used = held * (0.75 + 0.2 * math.sin(minutes / 40)) if held else 0.0
        NodeSample.objects.create(node=node, at=at, slots=2 if minutes > 60 else 1, held=held, used=used)
        queued = max(0, int(4 * math.sin(minutes / 180)))
        QueueSample.objects.create(at=at, queued=queued, on_hold=1 if queued > 2 else 0, running=min(held, 1))


def looked_at(browser, base: str, path: str, user: str, width: int, scheme: str, shot: str) -> dict:
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page = logged_in_page(context, base, user, f"pw-{user}")
    page.goto(f"{base}{path}")
    page.wait_for_selector("svg.line-chart")
    found = page.evaluate(
        """() => {
            const charts = [...document.querySelectorAll('svg.line-chart')];
            const line = charts[0].querySelector('polyline.accent, polyline.ok');
            return {
                overflow: document.documentElement.scrollWidth - window.innerWidth,
                widest: Math.max(...charts.map(chart => chart.getBoundingClientRect().right)),
                stroke: getComputedStyle(line).stroke,
                label: parseFloat(getComputedStyle(charts[0].querySelector('text.y')).fontSize)
                    * charts[0].getBoundingClientRect().width / 480,
            };
        }"""
    )
    if folder := os.environ.get("E31_SCREENSHOTS"):
        page.screenshot(
            path=str(
                Path(folder) / f"{shot}{'-phone' if width < 640 else ''}{'-dark' if scheme == 'dark' else ''}.png"
            ),
            full_page=True,
        )
    context.close()
    return found


def test_a_finished_jobs_charts_read_at_1280_and_390_px_in_light_and_dark(
    browser, live_server, partner, organisation, gpu_slots, rate_card
):
    pk = finished_job(organisation, gpu_slots)
    strokes = set()
    for width in WIDTHS:
        for scheme in ("light", "dark"):
            found = looked_at(browser, live_server.url, f"/jobs/{pk}/", "partner", width, scheme, "job-charts")
            assert found["overflow"] <= 0, f"the page scrolls sideways at {width} px"
            assert found["widest"] <= width
            assert found["label"] >= 10, f"the figures of the axis are {found['label']:.1f} px at {width} px"
            strokes.add((scheme, found["stroke"]))
    assert len({stroke for _, stroke in strokes}) == 2, "dark mode draws in its own colours"


def test_the_fleets_charts_read_at_1280_and_390_px_in_light_and_dark(browser, live_server, operator, gpu_slots):
    a_day_of_the_fleet(gpu_slots)
    for width, scheme in ((1280, "light"), (390, "light"), (390, "dark")):
        found = looked_at(browser, live_server.url, FLEET, "operator", width, scheme, "console-charts")
        assert found["overflow"] <= 0, f"the page scrolls sideways at {width} px"
        assert found["label"] >= 10


def test_a_running_jobs_charts_follow_its_shards_without_a_reload(
    browser, live_server, partner, organisation, online_slots
):
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=2, records_total=1000)
    lifecycle.start_hold(job, online_slots[:2])
    watched = Watched(browser, live_server.url)
    watched.log_in("partner", "pw-partner")
    watched.visit(f"/jobs/{job.pk}/")
    page = watched.page
    assert "No shard has finished yet" in page.inner_text("#charts")
    page.evaluate("document.querySelector('#charts').dataset.loaded = 'yes'")
    began = timezone.now() - timedelta(seconds=20)
    Shard.objects.create(
        job=job, index=0, first_record=1, record_count=250, first_line=2, start_byte=0, end_byte=1,
        status=Shard.Status.DONE, started_at=began, finished_at=began + timedelta(seconds=10),
    )  # fmt: skip
    page.wait_for_selector("#charts svg title:text('Records done')", state="attached", timeout=30_000)
    assert page.evaluate("document.querySelector('#charts').dataset.loaded") is None, "the charts came anew"
    assert page.url.endswith(f"/jobs/{job.pk}/"), "no reload"
    watched.check("the job's charts, redrawn by htmx")
