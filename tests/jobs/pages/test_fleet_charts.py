"""The operators' charts of the last day: each node's slots held against used, and the queue's length, as beat
sampled them, over the charts' width from the first sample; for operators who may view jobs only."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Node, NodeSample, QueueSample
from tests.jobs.pages.test_job_charts import charts_of
from tests.jobs.test_charts import close, plotted
from tests.support import assert_for_operators_who_may_view_jobs, client_for

pytestmark = pytest.mark.django_db

FLEET = "/admin/jobs/job/fleet/"
MINUTE = timedelta(minutes=1)


def led(points: list) -> list:
    """Minutes as drawn: each stands for its minute, so the line starts half a minute before the first and ends
    half a minute after the last."""
    return [(points[0][0] - MINUTE / 2, points[0][1]), *points, (points[-1][0] + MINUTE / 2, points[-1][1])]


@pytest.fixture
def sampled(online_slots):
    """Three minutes of the fake node: one slot held and half used, then two held and fully used."""
    node, now = online_slots[0].node, timezone.now().replace(second=0, microsecond=0)
    for minutes, held, used, queued in ((3, 1, 0.5, 2), (2, 2, 2.0, 1), (1, 2, 2.0, 0)):
        at = now - timedelta(minutes=minutes)
        NodeSample.objects.create(node=node, at=at, slots=4, held=held, used=used)
        QueueSample.objects.create(at=at, queued=queued, on_hold=0, running=1)
    return now


def test_it_draws_each_nodes_held_and_used_and_the_queue(sampled, operator):
    html = client_for(operator).get(FLEET).content.decode()
    svgs = charts_of(html)
    minutes = [sampled - timedelta(minutes=m) for m in (3, 2, 1)]
    node = svgs["fake-node"]
    assert close(plotted(node, "Held"), led(list(zip(minutes, (1, 2, 2), strict=True))), 4, seconds=1)
    assert close(plotted(node, "Used"), led(list(zip(minutes, (0.5, 2, 2), strict=True))), 4, seconds=1)
    assert close(plotted(node, "Slots online"), led([(m, 4) for m in minutes]), 4, seconds=1)
    assert 'data-top="6.0"' in node, "room above the slots online: their line is not the chart's top edge"
    queued = plotted(svgs["The queue"], "Queued")
    assert close(queued, led(list(zip(minutes, (2, 1, 0), strict=True))), 2, seconds=1)
    assert 'hx-trigger="every 60s"' in html and "<summary>The figures</summary>" in html


def test_one_minute_sampled_is_a_line_of_every_series(online_slots, operator):
    at = timezone.now().replace(second=0, microsecond=0)
    NodeSample.objects.create(node=online_slots[0].node, at=at, slots=4, held=1, used=None)
    html = client_for(operator).get(FLEET).content.decode()
    assert "<circle" not in html
    for name, value in (("Held", 1), ("Slots online", 4)):
        drawn = plotted(charts_of(html)["fake-node"], name)
        assert len(drawn) >= 2 and all(abs(v - value) < 0.01 for _, v in drawn), f"{name} is a line"
        assert drawn[-1][0] - drawn[0][0] >= MINUTE / 2
    assert "Its slots report no utilisation (CPU slots): only what is held is drawn." in html
    assert "The queue has not been sampled in the last day" in html


def test_with_no_sample_it_says_what_takes_them(operator, db):
    html = client_for(operator).get(FLEET).content.decode()
    assert "No node has been sampled in the last day" in html and "line-chart" not in html


def test_a_sample_older_than_a_day_is_not_drawn(online_slots, operator):
    at = timezone.now() - timedelta(hours=24, minutes=5)
    NodeSample.objects.create(node=online_slots[0].node, at=at, slots=4, held=1, used=None)
    assert "No node has been sampled in the last day" in client_for(operator).get(FLEET).content.decode()


def test_it_refreshes_as_a_fragment_in_few_queries(sampled, operator, django_assert_max_num_queries):
    client = client_for(operator)
    client.get(FLEET)
    with django_assert_max_num_queries(7):  # the login, the nodes' count and page, the fleet, them, the queue
        fragment = client.get(FLEET, headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="charts"') and "<html" not in fragment


def test_a_fleet_of_many_nodes_is_added_up_whole_and_drawn_a_page_of_nodes_at_a_time(operator, db):
    at = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    nodes = [Node.objects.create(name=f"box-{n:02}") for n in range(15)]
    NodeSample.objects.bulk_create(
        NodeSample(node=node, at=at, slots=8, held=n % 3, used=None) for n, node in enumerate(nodes)
    )
    client = client_for(operator)
    first = charts_of(client.get(FLEET).content.decode())
    assert close(plotted(first["The whole fleet"], "Slots online"), led([(at, 120)]), 120, seconds=1)
    assert close(plotted(first["The whole fleet"], "Held"), led([(at, 15)]), 120, seconds=1), "0+1+2, five times"
    assert [name for name in first if name.startswith("box-")] == [f"box-{n:02}" for n in range(12)]
    page = client.get(f"{FLEET}?page=2", headers={"HX-Request": "true"}).content.decode()
    assert [name for name in charts_of(page) if name.startswith("box-")] == ["box-12", "box-13", "box-14"]
    assert f'hx-get="{FLEET}?page=2"' in page, "its refresh stays on its page"
    assert "Page 2 of 2 · 13–15 of 15 nodes" in page


def test_a_fleet_sampled_for_an_hour_is_spread_over_the_charts_width(online_slots, operator):
    now = timezone.now().replace(second=0, microsecond=0)
    first = now - timedelta(minutes=60)
    for minutes in range(60, -1, -1):
        at = now - timedelta(minutes=minutes)
        NodeSample.objects.create(node=online_slots[0].node, at=at, slots=4, held=minutes % 3, used=None)
        QueueSample.objects.create(at=at, queued=1, on_hold=0, running=1)
    html = client_for(operator).get(FLEET).content.decode()
    for title, svg in charts_of(html).items():
        assert re.search(r'data-start="([^"]+)"', svg)[1] == first.isoformat(), f"{title} starts at the first sample"
        assert len(re.findall(r'<text class="x ', svg)) >= 3, f"{title}'s time axis is marked"
    held = plotted(charts_of(html)["fake-node"], "Held")
    assert held[0][0] == first and len(held) == 61 + 1, "a point a minute, from the left edge, led on at the right"


def test_it_is_for_operators_who_may_view_jobs(django_user_model, partner_client, sampled):
    viewer = assert_for_operators_who_may_view_jobs(FLEET, partner_client, django_user_model)
    assert "The fleet over the last day" in viewer.get("/admin/").content.decode()
