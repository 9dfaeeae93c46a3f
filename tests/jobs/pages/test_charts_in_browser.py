"""The charts in a real browser (Chromium): a finished job's page and the operators' fleet page read at 1280 px and
at 390 px, in light and in dark mode, without the page scrolling sideways; a 5 s job's charts and the fleet's are
lines, every series drawn, under time labels that differ and do not overlap. With E31_SCREENSHOTS set, each is
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


def five_seconds_of_a_job(organisation, slots) -> int:
    """A job held 5 s on two CPU slots: four shards of 250 records, two on each slot, a second or two each."""
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=2, records_total=1_000)
    lifecycle.start_hold(job, slots)
    start = timezone.now() - timedelta(minutes=10)
    end = start + timedelta(seconds=5)
    Allocation.objects.filter(job=job).update(held_from=start, held_to=end)
    for index, (began, took) in enumerate(((0.3, 2.1), (0.4, 1.7), (2.4, 2.2), (2.1, 2.0))):
        Shard.objects.create(
            job=job, index=index, first_record=index * 250 + 1, record_count=250, first_line=index * 250 + 2,
            start_byte=index, end_byte=index + 1, status=Shard.Status.DONE,
            started_at=start + timedelta(seconds=began), finished_at=start + timedelta(seconds=began + took),
        )  # fmt: skip
    JobEvent.objects.filter(job=job).update(at=start)
    JobEvent.objects.create(job=job, state=State.SUCCEEDED, at=end)
    job.state, job.started_at, job.ended_at, job.records_out = State.SUCCEEDED, start, end, 1_000
    job.save()
    return job.pk


# What each chart draws, as the browser lays it out: its series' lines, any dot, its time labels and whether two of
# them overlap.
DRAWN = """() => [...document.querySelectorAll('svg.line-chart')].map(chart => {
    const labels = [...chart.querySelectorAll('text.x')].map(text => text.getBoundingClientRect());
    return {
        title: chart.querySelector('title').textContent,
        width: chart.getBoundingClientRect().width,
        legend: [...chart.closest('figure').querySelectorAll('ul.legend li')].map(item => item.textContent.trim()),
        lines: Object.fromEntries([...chart.querySelectorAll('polyline')].map(line => [
            line.dataset.series, {points: line.points.numberOfItems, width: line.getBoundingClientRect().width},
        ])),
        circles: chart.querySelectorAll('circle').length,
        labels: [...chart.querySelectorAll('text.x')].map(text => text.textContent),
        overlapping: labels.some((box, n) => n > 0 && box.left < labels[n - 1].right),
        inside: labels.every(box => box.left >= chart.getBoundingClientRect().left - 0.5
            && box.right <= chart.getBoundingClientRect().right + 0.5),
    };
})"""


def assert_drawn_as_lines(charts: list[dict], width: int) -> None:
    """Every series in a chart's legend drawn as a line of two points or more, no dot; its time labels each once,
    apart and inside the chart."""
    assert charts
    for chart in charts:
        title = chart["title"]
        assert chart["circles"] == 0, f"{title}: a dot at {width} px"
        for name in chart["legend"]:
            line = chart["lines"].get(name)
            if line is None and name.endswith("used"):  # CPU slots report no utilisation: the chart says so
                continue
            assert line and line["points"] >= 2 and line["width"] > 2, f"{title}: {name} is not a line at {width} px"
        labels = chart["labels"]
        assert len(labels) >= 2 and len(set(labels)) == len(labels), f"{title}: time labels {labels}"
        assert not chart["overlapping"] and chart["inside"], f"{title}: time labels {labels} at {width} px"


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
    found["charts"] = page.evaluate(DRAWN)
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
            assert_drawn_as_lines(found["charts"], width)
            strokes.add((scheme, found["stroke"]))
    assert len({stroke for _, stroke in strokes}) == 2, "dark mode draws in its own colours"


def test_the_fleets_charts_read_at_1280_and_390_px_in_light_and_dark(browser, live_server, operator, gpu_slots):
    a_day_of_the_fleet(gpu_slots)
    for width, scheme in ((1280, "light"), (390, "light"), (390, "dark")):
        found = looked_at(browser, live_server.url, FLEET, "operator", width, scheme, "console-charts")
        assert found["overflow"] <= 0, f"the page scrolls sideways at {width} px"
        assert found["label"] >= 10
        assert_drawn_as_lines(found["charts"], width)
        assert all("Slots online" in chart["lines"] for chart in found["charts"] if chart["title"] != "The queue")


def test_a_five_second_jobs_charts_are_lines_under_round_seconds(
    browser, live_server, partner, organisation, online_slots, rate_card
):
    pk = five_seconds_of_a_job(organisation, online_slots[:2])
    for width, scheme in ((1280, "light"), (390, "light"), (390, "dark")):
        found = looked_at(browser, live_server.url, f"/jobs/{pk}/", "partner", width, scheme, "job-charts-5s")
        assert found["overflow"] <= 0, f"the page scrolls sideways at {width} px"
        assert_drawn_as_lines(found["charts"], width)
        records = next(chart for chart in found["charts"] if chart["title"] == "Records done")
        assert all(label.count(":") == 2 for label in records["labels"]), "5 s are marked in seconds"


def test_a_fleet_sampled_for_minutes_is_drawn_over_the_charts_width(browser, live_server, operator, gpu_slots):
    now = timezone.now().replace(second=0, microsecond=0)
    for minutes in range(6, -1, -1):
        at = now - timedelta(minutes=minutes)
        NodeSample.objects.create(node=gpu_slots[0].node, at=at, slots=2, held=min(2, minutes % 3), used=0.5)
        QueueSample.objects.create(at=at, queued=minutes % 2, on_hold=0, running=1)
    found = looked_at(browser, live_server.url, FLEET, "operator", 1280, "light", "console-charts-minutes")
    assert_drawn_as_lines(found["charts"], 1280)
    for chart in found["charts"]:
        widest, room = max(line["width"] for line in chart["lines"].values()), chart["width"] * 424 / 480
        assert widest > 0.8 * room, f"{chart['title']}: minutes drawn over {widest:.0f} px of {room:.0f}"


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
