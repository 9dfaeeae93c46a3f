"""GET /api/v1/jobs/<id>/ and its timeline, cancel and receipt: the job with the figures of its page (JobFacts),
the page's sentences when it cannot be cancelled or has no receipt yet."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from api.representation import job_json
from billing.anchor import head_of
from jobs import lifecycle
from jobs.facts import JobFacts
from jobs.models import Job, Shard, State
from jobs.scheduling import promises
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_job(organisation, partner, online_slots, rate_card):
    """A running job on two slots, held for ten minutes, two of its four shards of 1,000 records done."""
    job = make_job(organisation, State.QUEUED, created_by=partner, gpus=2, records_total=4000)
    for index in range(4):
        Shard.objects.create(
            job=job, index=index, first_record=1 + 1000 * index, record_count=1000, first_line=2, start_byte=0,
            end_byte=10, status=Shard.Status.DONE if index < 2 else Shard.Status.PENDING,
        )  # fmt: skip
    assert lifecycle.start_hold(job, online_slots[:2])
    started = timezone.now() - timedelta(minutes=10)
    Job.objects.filter(pk=job.pk).update(started_at=started)
    job.allocations.update(held_from=started)
    return Job.objects.get(pk=job.pk)


def test_it_gives_the_job_with_its_pages_figures(running_job, partner_api):
    before = JobFacts(running_job).meter.gpu_hours
    answer = partner_api.get(f"/api/v1/jobs/{running_job.pk}/")
    assert answer.status_code == 200
    job = answer.json()
    facts = JobFacts(running_job)
    assert job["id"] == running_job.pk and job["url"] == f"/api/v1/jobs/{running_job.pk}/"
    assert job["page"] == f"/jobs/{running_job.pk}/"
    assert job["state"] == "running" and job["state_display"] == "Running"
    assert job["progress"]["records_done"] == facts.progress.records_done == 2000
    assert job["progress"]["records_total"] == 4000 and job["progress"]["percent"] == 50
    assert job["progress"]["records_per_second"] == pytest.approx(facts.progress.records_per_second, rel=0.01)
    assert job["progress"]["eta_seconds"] == pytest.approx(facts.progress.eta_seconds, rel=0.01)
    assert job["meter"]["currency"] == "USD" and job["meter"]["rate"] == "3.6000"
    assert before <= Decimal(job["meter"]["gpu_hours"]) <= facts.meter.gpu_hours, "the meter as the page counts it"
    assert job["request"] == {
        "gpus": 2,
        "hours": "1.00",
        "shape": "short-wide",
        "kind": "fixed",
        "max_gpus": 2,
        "deadline": None,
        "allow_partial": False,
    }
    assert job["queue"] == {"place": None, "latest_start": None}
    assert job["output"] == {"files": [], "manifest": None}


def test_a_queued_job_gives_its_place_and_latest_start(organisation, online_slots, partner_api):
    first = make_job(organisation, State.QUEUED, queued_at=timezone.now() - timedelta(minutes=1), gpus=4)
    lifecycle.start_hold(first, online_slots)
    second = make_job(organisation, State.QUEUED, gpus=4)
    queue = partner_api.get(f"/api/v1/jobs/{second.pk}/").json()["queue"]
    facts = JobFacts(Job.objects.get(pk=second.pk))
    assert queue["place"] == facts.queue_position == 1
    assert queue["latest_start"] == facts.latest_start.isoformat()


def test_a_job_told_its_deadline_can_no_longer_be_met_says_so_and_why(organisation, online_slots, partner_api):
    due = timezone.now() + timedelta(minutes=90)
    first = make_job(organisation, State.QUEUED, gpus=4, deadline=due, deadline_feasible=True)
    assert partner_api.get(f"/api/v1/jobs/{first.pk}/").json()["deadline_at_risk"] is None, "not told: on time"
    make_job(organisation, State.QUEUED, gpus=4, deadline=due - timedelta(minutes=10), deadline_feasible=True)
    assert promises.check() == [first.pk]
    first.refresh_from_db()
    told = partner_api.get(f"/api/v1/jobs/{first.pk}/").json()
    assert told["deadline_feasible"] is True, "what it was told at submit stays as it was"
    assert told["deadline_at_risk"] == {
        "since": first.deadline_at_risk_since.isoformat(),
        "reason": "earlier_deadline",
        "expected_finish": first.deadline_at_risk_finish.isoformat(),
        "message": first.deadline_at_risk,
    }


def test_webhooks_and_routes_write_the_same_job(running_job, partner_api):
    ended = Job.objects.get(pk=make_job(running_job.organisation, State.SUCCEEDED).pk)
    assert partner_api.get(f"/api/v1/jobs/{ended.pk}/").json() == json.loads(json.dumps(job_json(ended)))


def test_it_gives_the_timeline_oldest_first(running_job, partner_api):
    events = partner_api.get(f"/api/v1/jobs/{running_job.pk}/events/").json()
    assert [event["state"] for event in events] == [event.state for event in running_job.events.order_by("at", "pk")]
    assert events[-1]["state"] == "running" and set(events[-1]) == {"at", "state", "message"}


def test_it_cancels_a_running_job_and_releases_its_holds(running_job, partner_api):
    answer = partner_api.post(f"/api/v1/jobs/{running_job.pk}/cancel/")
    assert answer.status_code == 200
    assert answer.json()["state"] == "cancelled"
    assert not running_job.allocations.filter(held_to__isnull=True).exists()
    assert f"cancelled by {running_job.created_by}" in running_job.events.last().message


def test_an_ended_job_cannot_be_cancelled_in_the_pages_words(organisation, partner_api):
    job = make_job(organisation, State.SUCCEEDED)
    answer = partner_api.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert answer.status_code == 409
    assert answer.json() == {
        "error": {"code": "conflict", "message": f"Job {job.pk} has ended (succeeded) and can no longer be cancelled."}
    }


def test_cancel_is_a_post_that_needs_no_body(running_job, partner_api):
    answer = partner_api.get(f"/api/v1/jobs/{running_job.pk}/cancel/")
    assert answer.status_code == 405 and answer.json()["error"]["code"] == "method_not_allowed"
    assert (
        partner_api.post(f"/api/v1/jobs/{running_job.pk}/cancel/", "", content_type="application/json").status_code
        == 200
    )


def test_an_ended_jobs_receipt_lists_its_entries_and_totals(finished_job, partner_api):
    receipt = partner_api.get(f"/api/v1/jobs/{finished_job.pk}/receipt/").json()
    assert receipt["job"] == finished_job.pk and receipt["reference"] == f"E31-partner-lab-{finished_job.pk}"
    assert [entry["kind"] for entry in receipt["entries"]] == ["hold"]
    assert receipt["totals"] == [{"currency": "USD", "amount": "3.6000"}]
    assert receipt["ledger_head"] == head_of(finished_job.organisation).as_json(), "the organisation's, as it stands"


def test_a_job_still_running_has_no_receipt_yet(running_job, partner_api):
    answer = partner_api.get(f"/api/v1/jobs/{running_job.pk}/receipt/")
    assert answer.status_code == 409
    assert answer.json()["error"]["message"].startswith(f"Job {running_job.pk} is running. Its receipt is issued when")
