"""The operators' charts of the last day: each node's slots held against used, and the queue's length, as beat
sampled them; for operators who may view jobs only."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Node, NodeSample, QueueSample
from tests.jobs.pages.test_job_charts import charts_of
from tests.jobs.test_charts import close, plotted
from tests.support import assert_for_operators_who_may_view_jobs, client_for

pytestmark = pytest.mark.django_db

FLEET = "/admin/jobs/job/fleet/"


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
    assert close(plotted(svgs["fake-node"], "Held"), list(zip(minutes, (1, 2, 2), strict=True)), 4, seconds=30)
    assert close(plotted(svgs["fake-node"], "Used"), list(zip(minutes, (0.5, 2, 2), strict=True)), 4, seconds=30)
    assert close(plotted(svgs["fake-node"], "Slots online"), [(m, 4) for m in minutes], 4, seconds=30)
    assert close(plotted(svgs["The queue"], "Queued"), list(zip(minutes, (2, 1, 0), strict=True)), 2, seconds=30)
    assert 'hx-trigger="every 60s"' in html and "<summary>The figures</summary>" in html


def test_one_minute_sampled_is_a_dot(online_slots, operator):
    at = timezone.now().replace(second=0, microsecond=0)
    NodeSample.objects.create(node=online_slots[0].node, at=at, slots=4, held=1, used=None)
    html = client_for(operator).get(FLEET).content.decode()
    assert '<circle class="accent" data-series="Held"' in html
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
    assert close(plotted(first["The whole fleet"], "Slots online"), [(at, 120)], 120, seconds=30)
    assert close(plotted(first["The whole fleet"], "Held"), [(at, 15)], 120, seconds=30), "0+1+2, five times"
    assert [name for name in first if name.startswith("box-")] == [f"box-{n:02}" for n in range(12)]
    page = client.get(f"{FLEET}?page=2", headers={"HX-Request": "true"}).content.decode()
    assert [name for name in charts_of(page) if name.startswith("box-")] == ["box-12", "box-13", "box-14"]
    assert f'hx-get="{FLEET}?page=2"' in page, "its refresh stays on its page"
    assert "Page 2 of 2 · 13–15 of 15 nodes" in page


def test_it_is_for_operators_who_may_view_jobs(django_user_model, partner_client, sampled):
    viewer = assert_for_operators_who_may_view_jobs(FLEET, partner_client, django_user_model)
    assert "The fleet over the last day" in viewer.get("/admin/").content.decode()
