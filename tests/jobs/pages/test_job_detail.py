"""A job's page: its live progress fragment, which tells htmx to stop polling once the job ends, and
the operators' view of the same job in the admin console."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import lifecycle, scheduling
from jobs.models import Job, Shard, State
from jobs.scheduling import promises
from jobs.templatetags.jobs_extras import duration
from tests.factories import finished_sample, make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_job(organisation, online_slots, rate_card):
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=2, records_total=1000)
    for index in range(4):
        Shard.objects.create(
            job=job,
            index=index,
            first_record=index * 250 + 1,
            record_count=250,
            first_line=index * 250 + 2,
            start_byte=index * 1000,
            end_byte=(index + 1) * 1000,
            status=Shard.Status.DONE if index == 0 else Shard.Status.PENDING,
        )
    lifecycle.start_hold(job, online_slots[:2])
    job.refresh_from_db()
    return job


def test_it_polls_the_progress_of_a_running_job(running_job, partner_client):
    page = partner_client.get(f"/jobs/{running_job.pk}/").content.decode()
    assert f'hx-get="/jobs/{running_job.pk}/progress/?shown=running"' in page
    assert 'hx-trigger="every 2s"' in page
    assert '<div id="panels">' in page and "Timeline" in page, "the panels are on the page, polled or not"

    fragment = partner_client.get(f"/jobs/{running_job.pk}/progress/?shown=running", headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    html = fragment.content.decode()
    assert "<html" not in html
    assert "250 / 1,000" in html and "1 / 4" in html
    assert "Holding 2 CPU slots: CPU slot 0 on fake-node, CPU slot 1 on fake-node." in html
    assert "Cancel job" in html
    assert "Timeline" not in html and "panels" not in html, "the state is the one shown: only the status card"


def test_its_fragment_costs_at_most_five_queries(running_job, partner_client, django_assert_max_num_queries):
    """The session, the user, the job with its shards counted, its holds with their slots, the rate."""
    with django_assert_max_num_queries(5):
        html = partner_client.get(f"/jobs/{running_job.pk}/progress/?shown=running").content.decode()
    assert "250 / 1,000" in html and "Cost so far" in html and " USD" in html, "the counts and the meter"
    assert "Holding 2 CPU slots" in html


def test_a_queued_jobs_fragment_costs_at_most_four_queries(
    organisation, online_slots, partner_client, django_assert_max_num_queries
):
    """The session, the user, the job with its shards counted, and what the fleet's slots are called:
    a job never held has no holds nor meter to read, and its place in the queue is stored in Redis."""
    job = make_job(organisation, State.QUEUED, gpus=2)
    scheduling.refresh_queue_figures()  # as the scheduling task does after each pass
    with django_assert_max_num_queries(4):
        html = partner_client.get(f"/jobs/{job.pk}/progress/?shown=queued").content.decode()
    assert "Number 1 in the queue." in html and "A fixed request starts once all its CPU slots are free" in html
    assert "this one needs 2" in html
    assert "CPU slot-hours held</dt><dd>0</dd>" in html


def test_the_panels_come_with_the_fragment_that_finds_the_state_changed(running_job, partner_client):
    html = partner_client.get(f"/jobs/{running_job.pk}/progress/?shown=queued").content.decode()
    assert f'hx-get="/jobs/{running_job.pk}/progress/?shown=running"' in html, "it polls on from the new state"
    panels = html[html.index('<div id="panels" hx-swap-oob="true">') :]
    assert "Timeline" in panels and "Running" in panels and "customers.csv" in panels


def test_it_stops_the_polling_when_the_job_ends(running_job, partner_client):
    lifecycle.cancel(running_job)
    fragment = partner_client.get(f"/jobs/{running_job.pk}/progress/?shown=running", headers={"HX-Request": "true"})
    assert fragment.status_code == 286
    html = fragment.content.decode()
    assert "Cancelled" in html and "hx-trigger" not in html and "Cancel job" not in html
    assert 'id="panels" hx-swap-oob="true"' in html and "cancelled" in html, "the timeline says so too"
    heading = html[html.index('<div class="heading" id="heading" hx-swap-oob="true">') :]
    assert f'href="/jobs/new/?again={running_job.pk}">Submit again</a>' in heading, "offered without a reload"


def test_it_polls_the_job_list_only_while_a_job_is_active(running_job, partner_client):
    assert 'hx-trigger="every 2s"' in partner_client.get("/jobs/").content.decode()
    lifecycle.cancel(running_job)
    assert 'hx-trigger="every 2s"' not in partner_client.get("/jobs/").content.decode()


def test_it_shows_the_job_to_operators_with_its_shards_and_holds(running_job, operator):
    client = client_for(operator)
    Job.objects.filter(pk=running_job.pk).update(
        source_kind=Job.Source.URL, source_uri="https://x.example/a.csv?sig=s3"
    )
    page = client.get(f"/admin/jobs/job/{running_job.pk}/change/").content.decode()
    assert "Shards" in page and "Allocations" in page and "CPU slot 1 on fake-node" in page
    assert "https://x.example/a.csv?…" in page and "sig=s3" not in page, "a URL's query is not shown, even here"
    for url in ("/admin/jobs/node/", "/admin/jobs/gpu/", "/admin/portal/organisation/", "/admin/auth/user/"):
        assert client.get(url).status_code == 200, url
    jobs = client.get("/admin/jobs/job/", {"kind__exact": "pass"}).content.decode()
    assert f"/admin/jobs/job/{running_job.pk}/change/" in jobs and "Kind" in jobs


def test_it_shows_how_far_staging_has_got(organisation, partner_client, online_slots):
    started = timezone.now() - timedelta(seconds=10)
    job = make_job(
        organisation,
        State.STAGING,
        source_name="big.csv",
        staging_phase="copying",
        staging_done=500 * 10**6,
        staging_total=2000 * 10**6,
        staging_phase_started=started,
    )
    before = (timezone.now() - started).total_seconds()
    html = partner_client.get(f"/jobs/{job.pk}/progress/").content.decode()
    after = (timezone.now() - started).total_seconds()
    shown = re.search(r"Copying the data: 500.0\xa0MB of 2.0\xa0GB at (\d+\.\d) MB/s, (\d+) s left\.", html)
    assert shown, "the phase, its sizes, its rate and the time left"
    rate, left = float(shown[1]), int(shown[2])
    assert 500 / after - 0.05 <= rate <= 500 / before + 0.05, "the rate over the phase so far, however slow the request"
    assert 1500 / (500 / before) - 1 <= left <= 1500 / (500 / after) + 1
    assert 'max="100" value="25"' in html
    assert "No CPU slot is held yet." in html


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "–"),
        (0, "0 s"),
        (0.004, "under 0.1 s"),
        (0.31, "0.3 s"),
        (9.94, "9.9 s"),
        (9.96, "10 s"),
        (45.4, "45 s"),
        (200, "3 min 20 s"),
        (7500, "2 h 5 min"),
    ],
)
def test_durations_read_as_people_write_them_with_tenths_below_ten_seconds(seconds, shown):
    assert duration(seconds) == shown


def test_a_quick_staging_shows_how_long_it_took_not_zero_seconds(organisation, partner_client):
    job = make_job(organisation, State.QUEUED, source_name="small.csv", input_bytes=31_600_000, staging_seconds=0.309)
    html = partner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(r"<dt>Staged</dt><dd>31.6\xa0MB in 0.3 s \(102.3 MB/s\)</dd>", html), html


@pytest.mark.parametrize(
    ("params", "shown"),
    [({}, "–"), ({"columns": "", "model": None}, "–"), ({"columns": "", "batch_size": 64}, "batch_size=64 ")],
)
def test_it_shows_the_parameters_given_and_a_dash_for_none(organisation, partner_client, params, shown):
    job = make_job(organisation, params=params)
    page = partner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'<dt>Parameters</dt><dd class="mono">{shown}</dd>' in page


@pytest.mark.django_db
def test_without_javascript_a_live_job_page_reloads_itself_and_an_ended_one_does_not(organisation, partner_client):
    refresh = '<noscript><meta http-equiv="refresh" content="10"></noscript>'
    queued = partner_client.get(f"/jobs/{make_job(organisation, State.QUEUED).pk}/").content.decode()
    assert refresh in queued and "Without JavaScript this page reloads itself every 10 s." in queued
    ended = partner_client.get(f"/jobs/{make_job(organisation, State.SUCCEEDED).pk}/").content.decode()
    assert refresh not in ended and "reloads itself" not in ended


def test_a_sample_that_ran_over_every_record_says_its_output_is_the_whole_result(organisation, partner, online_slots):
    whole = "The sample ran over every record: its output is the whole result."
    part = finished_sample(organisation)
    assert whole not in client_for(partner).get(f"/jobs/{part.pk}/").content.decode()
    result = {**part.sample_result, "records": 36_000}
    complete = finished_sample(organisation, sample_result=result)
    page = client_for(partner).get(f"/jobs/{complete.pk}/").content.decode()
    assert whole in page and "No pass is needed" in page
    assert "Run the full pass" not in page, "no pass offered: it would be refused"


def test_it_tells_a_job_at_once_when_its_deadline_can_no_longer_be_met(organisation, online_slots, partner_client):
    now, due = timezone.now(), timezone.now() + timedelta(minutes=90)
    told_at_submit = {"expected_start": now, "expected_finish": now + timedelta(hours=1)}
    first = make_job(organisation, State.QUEUED, gpus=4, deadline=due, deadline_feasible=True, **told_at_submit)
    assert "before its deadline" in partner_client.get(f"/jobs/{first.pk}/").content.decode()
    make_job(organisation, State.QUEUED, gpus=4, deadline=due - timedelta(minutes=10), deadline_feasible=True)
    assert promises.check() == [first.pk]
    first.refresh_from_db()
    told = (
        f"Your deadline of {due:%Y-%m-%d %H:%M} UTC can no longer be met: a job with an earlier deadline, submitted "
        f"after it, takes the GPUs first. Expected finish {first.deadline_at_risk_finish:%Y-%m-%d %H:%M} UTC."
    )
    page = partner_client.get(f"/jobs/{first.pk}/").content.decode()
    assert told in page and "before its deadline" not in page, "the queue's figures in arrival order disagree"
    fragment = partner_client.get(f"/jobs/{first.pk}/progress/?shown=queued", headers={"HX-Request": "true"})
    assert told in fragment.content.decode(), "the status card, polled every 2 s, says it without a reload"
    lifecycle.cancel(first)
    page = partner_client.get(f"/jobs/{first.pk}/").content.decode()
    assert told not in page and "its deadline can no longer be met" in page, "ended: the timeline keeps it"
