"""A job's charts: records done and records per second from its shards, its slots held against what they
used from its holds' readings; drawn on its page, polled on their own while it runs, for its organisation only."""

import itertools
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import lifecycle
from jobs.models import Allocation, Shard, SlotReading, State
from tests.factories import make_job
from tests.jobs.test_charts import close, plotted

pytestmark = pytest.mark.django_db


def shard(job, index: int, records: int, started, seconds: float, status=Shard.Status.DONE) -> Shard:
    return Shard.objects.create(
        job=job, index=index, first_record=index * records + 1, record_count=records, first_line=index * records + 2,
        start_byte=index * 100, end_byte=(index + 1) * 100, status=status, started_at=started,
        finished_at=started + timedelta(seconds=seconds) if status != Shard.Status.PENDING else None,
    )  # fmt: skip


@pytest.fixture
def finished_job(organisation, online_slots, rate_card):
    """Two slots held for 60 s from `start`: four shards of 300 records, each taking 30 s, two at a time."""
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=2, records_total=1200)
    lifecycle.start_hold(job, online_slots[:2])
    start = timezone.now() - timedelta(minutes=5)
    Allocation.objects.filter(job=job).update(held_from=start)
    for index in range(4):
        shard(job, index, 300, start + timedelta(seconds=30 * (index // 2)), 30)
    for allocation in Allocation.objects.filter(job=job):
        for second, busy in ((10, 50), (40, 90)):
            SlotReading.objects.create(
                allocation=allocation, at=start + timedelta(seconds=second), utilisation=busy, memory_used_mb=1000
            )
    Allocation.objects.filter(job=job).update(held_to=start + timedelta(seconds=60))
    job.state = State.SUCCEEDED
    job.ended_at = start + timedelta(seconds=60)
    job.save()
    job.start = start
    return job


def test_its_page_draws_its_records_and_its_slots_held_and_used(finished_job, partner_client):
    page = partner_client.get(f"/jobs/{finished_job.pk}/").content.decode()
    assert 'id="charts"' in page and 'hx-trigger="every 15s"' not in page, "an ended job's charts are not polled"
    for title in ("Records done", "Records per second", "CPU slots held and used"):
        assert f">{title}</title>" in page
    assert "No CPU slot reported" not in page
    assert "<summary>The figures</summary>" in page


def test_the_charts_fragment_is_for_its_organisation_only(finished_job, partner_client, outsider_client):
    assert outsider_client.get(f"/jobs/{finished_job.pk}/charts/").status_code == 404
    assert outsider_client.get(f"/jobs/{finished_job.pk}/").status_code == 404
    assert partner_client.get(f"/jobs/{finished_job.pk}/charts/").status_code == 286, "ended: polling stops"


CHART = re.compile(r'<svg class="chart line-chart".*?<title id="[^"]+">([^<]+)</title>.*?</svg>')


def charts_of(html: str) -> dict[str, str]:
    """The page's charts by their titles."""
    return {match[1]: match[0] for match in CHART.finditer(html)}


def test_the_charts_draw_the_jobs_own_figures(finished_job, partner_client):
    svgs = charts_of(partner_client.get(f"/jobs/{finished_job.pk}/").content.decode())
    start = finished_job.start
    expected = [(start, 0), (start + timedelta(seconds=30), 600), (start + timedelta(seconds=60), 1200)]
    assert close(plotted(svgs["Records done"], "Records done"), expected, 1200)
    pace = plotted(svgs["Records per second"], "Records per second")
    assert len(pace) == 62 and all(abs(value - 20) < 0.05 for _, value in pace), "600 records every 30 s"
    assert close([pace[0], pace[-1]], [(start, 20), (start + timedelta(seconds=60), 20)], 1200), "edge to edge"
    used = plotted(svgs["CPU slots held and used"], "CPU slots used")
    readings = [(10, 1.0), (10.5, 1.0), (40.5, 1.8), (41, 1.8)]  # each second's span, led in and on
    assert close(used, [(start + timedelta(seconds=second), value) for second, value in readings], 2)
    held = plotted(svgs["CPU slots held and used"], "CPU slots held")
    assert {round(value, 2) for _, value in held} == {2.0}


def test_a_running_jobs_charts_poll_on_their_own_in_few_queries(
    organisation, online_slots, rate_card, partner_client, django_assert_max_num_queries
):
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=2, records_total=1000)
    lifecycle.start_hold(job, online_slots[:2])
    page = partner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'hx-get="/jobs/{job.pk}/charts/" hx-trigger="every 15s"' in page
    assert "No shard has finished yet" in page and ">CPU slots held and used</title>" in page
    assert "No CPU slot reported its utilisation (CPU slots have none)." in page
    shard(job, 0, 250, timezone.now() - timedelta(seconds=20), 10)
    with django_assert_max_num_queries(6):
        fragment = partner_client.get(f"/jobs/{job.pk}/charts/", headers={"HX-Request": "true"})
    html = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in html and ">Records done</title>" in html
    assert 'hx-trigger="every 15s"' in html, "it polls on while the job runs"
    with django_assert_max_num_queries(6):
        partner_client.get(f"/jobs/{job.pk}/progress/?shown=running")
    progress = partner_client.get(f"/jobs/{job.pk}/progress/?shown=running").content.decode()
    assert ">Records done</title>" not in progress, "the charts poll on their own, not with the progress"


def test_a_job_that_held_nothing_has_no_charts(organisation, partner_client):
    job = make_job(organisation, State.QUEUED)
    assert 'id="charts"' not in partner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="charts"' not in partner_client.get(f"/jobs/{job.pk}/charts/").content.decode()


def test_a_hold_just_started_with_one_reading_draws_it_as_a_line(organisation, online_slots, partner_client):
    job = make_job(organisation, State.QUEUED, gpus=1)
    lifecycle.start_hold(job, online_slots[:1])
    allocation = Allocation.objects.get(job=job)
    SlotReading.objects.create(allocation=allocation, at=allocation.held_from, utilisation=40, memory_used_mb=10)
    svgs = charts_of(partner_client.get(f"/jobs/{job.pk}/charts/").content.decode())
    svg = svgs["CPU slots held and used"]
    assert "<circle" not in svg
    used = plotted(svg, "CPU slots used")
    assert len(used) >= 2 and used[-1][0] - used[0][0] >= timedelta(seconds=0.9), "across its second's span"
    assert all(abs(value - 0.4) < 0.01 for _, value in used)


def test_a_five_second_job_is_drawn_in_lines_edge_to_edge(organisation, online_slots, rate_card, partner_client):
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=1, records_total=100)
    lifecycle.start_hold(job, online_slots[:1])
    start = timezone.now() - timedelta(minutes=1)
    Allocation.objects.filter(job=job).update(held_from=start, held_to=start + timedelta(seconds=5))
    shard(job, 0, 100, start + timedelta(seconds=0.5), 4)
    job.state, job.ended_at = State.SUCCEEDED, start + timedelta(seconds=5)
    job.save()
    html = partner_client.get(f"/jobs/{job.pk}/").content.decode()
    svgs = charts_of(html)
    assert "<circle" not in html and "still running" not in html, "an ended job's pace is drawn to its end"
    for title, name in (("Records done", "Records done"), ("Records per second", "Records per second")):
        drawn = plotted(svgs[title], name)
        assert len(drawn) >= 2 and drawn[0][0] - start < timedelta(seconds=0.1), f"{name} starts at the start"
        assert start + timedelta(seconds=5) - drawn[-1][0] < timedelta(seconds=0.1), f"{name} runs to the end"
    assert plotted(svgs["Records done"], "Records done")[-1][1] == pytest.approx(100, rel=0.01), "no cliff at its end"
    labels = re.findall(r'<text class="x [a-z]+"[^>]*>([^<]+)</text>', svgs["Records done"])
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels


def test_a_running_jobs_pace_stops_where_its_running_shards_began(
    organisation, online_slots, rate_card, partner_client
):
    """Two slots, a shard of 300 records each 0–30 s, then each on its next shard since 30 s and 35 s, 50 and 20
    records done of them so far, seen at 60 s: the pace is drawn to 30 s, no lower at its edge; the records
    done run on to now with the running shards' records."""
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=2, records_total=1200)
    lifecycle.start_hold(job, online_slots[:2])
    start = timezone.now() - timedelta(seconds=60)
    Allocation.objects.filter(job=job).update(held_from=start)
    shard(job, 0, 300, start, 30)
    shard(job, 1, 300, start, 30)
    for index, began, so_far in ((2, 30, 50), (3, 35, 20)):
        running = shard(job, index, 300, start + timedelta(seconds=began), 0, status=Shard.Status.RUNNING)
        Shard.objects.filter(pk=running.pk).update(records_done=so_far)
    job.refresh_from_db()
    assert job.state == State.RUNNING
    svgs = charts_of(partner_client.get(f"/jobs/{job.pk}/charts/").content.decode())
    pace = plotted(svgs["Records per second"], "Records per second")
    assert pace[-1][0] <= start + timedelta(seconds=30.5) and all(abs(value - 20) < 0.05 for _, value in pace)
    done = plotted(svgs["Records done"], "Records done")
    assert done[-1][1] == pytest.approx(670, rel=0.01) and done[-1][0] >= start + timedelta(seconds=59)
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(done)), "it never falls"
    assert "when the oldest shard still running began" in partner_client.get(f"/jobs/{job.pk}/").content.decode()
