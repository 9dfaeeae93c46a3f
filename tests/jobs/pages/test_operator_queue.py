"""The operators' live view of the queue: the fleet, the jobs holding it, the queue in order, staging."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import lifecycle
from jobs.models import Job, State
from tests.factories import make_job
from tests.support import admin_action, assert_for_operators_who_may_view_jobs, client_for

pytestmark = pytest.mark.django_db

QUEUE = "/admin/jobs/job/queue/"


def _job(organisation, gpus: int, state=State.QUEUED, minutes_ago: int = 0, **fields) -> Job:
    queued_at = timezone.now() - timedelta(minutes=minutes_ago)
    return make_job(organisation, state, gpus=gpus, hours=2, queued_at=queued_at, **fields)


def test_it_shows_the_fleet_the_holds_the_queue_in_order_and_the_staging(organisation, online_slots, operator):
    running = _job(organisation, 3, minutes_ago=30)
    assert lifecycle.start_hold(running, online_slots[:3])
    first, on_hold, second = (
        _job(organisation, 2, minutes_ago=20),
        _job(organisation, 1, minutes_ago=10),
        _job(organisation, 4),
    )
    lifecycle.put_on_hold(on_hold, reason="quota review")
    _job(organisation, 1, state=State.STAGING, source_kind=Job.Source.URL, staging_phase="downloading",
         staging_done=2_000_000, staging_total=8_000_000)  # fmt: skip

    page = client_for(operator).get(QUEUE).content.decode()
    assert "4 CPU slots online, 1 free." in page
    assert ">fake-node</a></td><td>yes</td><td>4</td><td>3</td>" in page
    running = Job.objects.get(pk=running.pk)
    assert f"#{running.pk}</a></td><td>Partner Lab</td><td>clean-table</td><td>3</td><td>3 × 2 h</td>" in page
    assert f"{running.time_limit_at():%Y-%m-%d %H:%M}" in page
    places = [page.index(f"#{job.pk}</a>") for job in (first, on_hold, second)]
    assert places == sorted(places), "in queue order"
    assert f'<td>1</td><td><a href="/admin/jobs/job/{first.pk}/change/">' in page
    assert f'<td>2 (on hold)</td><td><a href="/admin/jobs/job/{on_hold.pk}/change/">' in page, "it keeps its place"
    assert f'<td>3</td><td><a href="/admin/jobs/job/{second.pk}/change/">' in page
    assert ": quota review" in page
    deadline = timezone.now() + timedelta(days=1)
    _job(organisation, 5, deadline=deadline)
    page = client_for(operator).get(QUEUE).content.decode()
    assert "asks for more CPU slots than are online" in page
    assert f"<td>5 × 2 h, by {deadline:%Y-%m-%d %H:%M}</td>" in page
    assert "downloading: 2.0\xa0MB of 8.0\xa0MB" in page


def test_it_refreshes_itself_as_a_fragment(operator, online_slots):
    fragment = client_for(operator).get(QUEUE, HTTP_HX_REQUEST="true").content.decode()
    assert fragment.strip().startswith('<div id="live" hx-get="/admin/jobs/job/queue/" hx-trigger="every 5s"')
    assert "<html" not in fragment and "Nobody waits." in fragment


def test_it_is_for_operators_who_may_view_jobs(django_user_model, partner_client):
    viewer = assert_for_operators_who_may_view_jobs(QUEUE, partner_client, django_user_model)
    assert "The queue, live" in viewer.get("/admin/").content.decode()


def test_its_queries_do_not_grow_with_the_queue(organisation, online_slots, operator, django_assert_max_num_queries):
    client = client_for(operator)
    for minutes in range(120):
        _job(organisation, 2, minutes_ago=minutes)
    for _ in range(60):
        _job(organisation, 1, state=State.STAGING)
    with django_assert_max_num_queries(24):
        client.get(QUEUE, {"page": "2"}, HTTP_HX_REQUEST="true")


def test_it_shows_a_page_of_the_queue_in_its_places_and_the_counts_of_every_state(organisation, online_slots, operator):
    queued = [_job(organisation, 1, minutes_ago=100 - minutes) for minutes in range(53)]
    lifecycle.put_on_hold(queued[0], reason="")
    for _ in range(52):
        _job(organisation, 1, state=State.STAGING)
    for minutes in range(51):
        _job(organisation, 1, state=State.RUNNING, started_at=timezone.now() - timedelta(minutes=minutes))
    client = client_for(operator)
    first = client.get(QUEUE).content.decode()
    assert "Submitted: <strong>0</strong> · Staging: <strong>52</strong> · Queued: <strong>53</strong>" in first
    assert "Running: <strong>51</strong>" in first and "(the 50 that started first, of 51)" in first
    assert "on hold: <strong>1</strong>." in first
    assert f'<td>50</td><td><a href="/admin/jobs/job/{queued[49].pk}/change/">' in first
    assert f"/admin/jobs/job/{queued[50].pk}/change/" not in first
    assert "Page 1 of 2 · 1–50 of 53 queued jobs" in first and 'href="?page=2" rel="next"' in first
    assert "Staging <small>(the first 50 of 52)</small>" in first
    second = client.get(QUEUE, {"page": "2"}).content.decode()
    assert f'<td>51</td><td><a href="/admin/jobs/job/{queued[50].pk}/change/">' in second
    assert f'<td>53</td><td><a href="/admin/jobs/job/{queued[52].pk}/change/">' in second
    fragment = client.get(QUEUE, {"page": "2"}, HTTP_HX_REQUEST="true").content.decode()
    assert fragment.strip().startswith('<div id="live" hx-get="/admin/jobs/job/queue/?page=2"'), (
        "it refreshes its own page"
    )


def test_the_slots_held_are_the_open_holds_only(organisation, online_slots, operator):
    """A node's and a job's history of holds is not what they hold now."""
    for _ in range(3):
        done = _job(organisation, 2)
        assert lifecycle.start_hold(done, online_slots[:2])
        assert lifecycle.release(done)
    running = _job(organisation, 1)
    assert lifecycle.start_hold(running, online_slots[2:3])
    page = client_for(operator).get(QUEUE).content.decode()
    assert ">fake-node</a></td><td>yes</td><td>4</td><td>1</td>" in page
    assert f"#{running.pk}</a></td><td>Partner Lab</td><td>clean-table</td><td>1</td>" in page


@pytest.mark.parametrize("page", ["abc", "-1", "0", "9999"])
def test_a_page_that_is_not_one_is_said_not_a_500(organisation, online_slots, operator, page):
    _job(organisation, 1)
    response = client_for(operator).get(QUEUE, {"page": page})
    assert response.status_code == 200
    assert '<p class="errornote">' in response.content.decode()


def test_a_jobs_admin_page_groups_what_an_operator_needs_and_folds_the_bookkeeping(operator, organisation):
    job = make_job(organisation, State.QUEUED)
    page = client_for(operator).get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    headings = re.findall(r"<h2[^>]*>([^<]+)</h2>", page)
    for heading in ("Operator hold", "Work", "Data", "Request", "When", "Output and retention", "Bookkeeping"):
        assert heading in headings, heading
    bookkeeping = page[page.index(">Bookkeeping<") :]
    assert "collapse" in page[: page.index(">Bookkeeping<")].rsplit("<fieldset", 1)[-1], "folded away"
    assert "staging_claim" in bookkeeping and "field-layout" in bookkeeping
    assert 'name="state"' not in page and "source_secret" not in page, "read-only, the secret never shown"


def test_a_jobs_admin_page_gives_the_input_s_size_and_staging_time_in_words(operator, organisation):
    job = make_job(organisation, State.QUEUED, input_bytes=535_024, staging_seconds=0.08091521200003626)
    page = client_for(operator).get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "535.0\xa0kB (535,024 bytes)" in page and "0.1 s" in page
    assert "0.0809152120" not in page[: page.index(">Bookkeeping<")], "the raw figure only in the bookkeeping"


def test_the_console_s_cancel_counts_the_jobs_in_words(operator, organisation):
    jobs = [make_job(organisation, State.QUEUED) for _ in range(2)]
    response = admin_action(client_for(operator), "cancel", jobs)
    assert "Cancelled 2 jobs." in response.content.decode()
