"""Webhooks: an organisation's endpoints (made with a secret shown once, listed, removed) and a job's own URL hear
each change of a job's state, posted by a real worker to a real receiver on loopback, signed with the secret
and timestamped; a delivery not answered 2xx is tried again after the (shrunk) backoff, each attempt on the
job's delivery log and its page; a removed endpoint hears nothing more; targets pass the SSRF guard."""

import hashlib
import hmac
import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from api.webhooks import delivery
from api.webhooks.models import Attempt, Delivery, Endpoint
from api.webhooks.receivers import record
from jobs import lifecycle
from jobs.models import AtRisk, Job, State
from jobs.scheduling import promises
from tests.api.loopback import file_server, webhook_receiver
from tests.api.support import api_client, token_for
from tests.factories import make_job
from tests.support import EXAMPLE, client_for, wait_for, wait_for_end

REPLAY_WINDOW = 300  # seconds: how old a signature a receiver should still take (docs/api.md)


def make_endpoint(client, url: str) -> dict:
    answer = client.post("/api/v1/webhooks/", {"url": url}, content_type="application/json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def verified(post, secret: str) -> dict:
    """The body, once its signature is checked as a receiver should: the HMAC under the secret of
    "<t>.<body>", and t within the replay window."""
    fields = dict(part.split("=", 1) for part in post.headers["E31-Signature"].split(","))
    expected = hmac.new(secret.encode(), f"{fields['t']}.".encode() + post.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected), "signed with the endpoint's secret"
    assert abs(time.time() - int(fields["t"])) < REPLAY_WINDOW, "timestamped now"
    return json.loads(post.body)


def deliveries(client, job: Job) -> list[dict]:
    answer = client.get(f"/api/v1/jobs/{job.pk}/webhooks/")
    assert answer.status_code == 200
    return answer.json()["results"]


@pytest.mark.django_db
def test_an_endpoint_is_made_with_a_secret_shown_once_listed_and_removed(partner_api, partner, organisation):
    made = make_endpoint(partner_api, "http://localhost:9/e31")
    assert made["secret"].startswith("whsec_") and len(made["secret"]) == 70
    stored = Endpoint.objects.get()
    assert made["secret"] not in stored.sealed_secret and stored.secret == made["secret"]
    listed = partner_api.get("/api/v1/webhooks/").json()
    assert listed == [
        {"id": stored.pk, "url": "http://localhost:9/e31", "created": made["created"], "created_by": "partner"}
    ]
    assert partner_api.delete(f"/api/v1/webhooks/{stored.pk}/").status_code == 204
    assert partner_api.get("/api/v1/webhooks/").json() == []
    assert partner_api.delete(f"/api/v1/webhooks/{stored.pk}/").status_code == 404


TARGETS = [
    ("http://127.0.0.1/hook", "127.0.0.1 is not a public address"),
    ("http://10.0.0.1/hook", "10.0.0.1 is not a public address"),
    ("http://[::1]/hook", "::1 is not a public address"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is not a public address"),
    ("ftp://hooks.example.com/", "Only http:// and https:// URLs"),
    ("https://user:pw@hooks.example.com/", "user name or password"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "why"), TARGETS)
def test_a_target_the_ssrf_guard_refuses_is_refused_when_the_endpoint_is_made(partner_api, url, why):
    answer = partner_api.post("/api/v1/webhooks/", {"url": url}, content_type="application/json")
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("invalid", "url")
    assert error["message"].startswith(f"Webhooks cannot go to {url}: ") and why in error["message"]
    assert not Endpoint.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_change_of_state_is_delivered_signed_and_on_the_jobs_log_and_page(fleet, partner_api, partner, organisation):
    with webhook_receiver() as receiver:
        secret = make_endpoint(partner_api, receiver.url())["secret"]
        job = make_job(organisation, created_by=partner)
        lifecycle.cancel(job)
        wait_for(lambda: receiver.posts, timeout=20, what="the delivery")
    post = receiver.posts[0]
    body = verified(post, secret)
    assert (body["type"], body["id"]) == ("job.state_changed", post.headers["E31-Delivery"])
    assert (body["data"]["state"], body["data"]["previous_state"]) == ("cancelled", "submitted")
    assert (body["data"]["job"]["id"], body["data"]["job"]["state"]) == (job.pk, "cancelled")
    assert post.headers["Content-Type"] == "application/json"
    wait_for(lambda: Delivery.objects.get().status == Delivery.Status.DELIVERED, what="the delivery recorded")
    [logged] = deliveries(partner_api, job)
    assert (logged["id"], logged["status"], logged["state"], logged["previous_state"]) == (
        body["id"], "delivered", "cancelled", "submitted",
    )  # fmt: skip
    assert [(attempt["number"], attempt["http_status"], attempt["error"]) for attempt in logged["attempts"]] == [
        (1, 204, "")
    ]
    page = client_for(partner).get(f"/jobs/{job.pk}/").content.decode()
    assert "Webhooks" in page and receiver.url() in page and "HTTP 204" in page


@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_fails_twice_gets_it_on_the_third_attempt_after_the_backoff(fleet, partner_api, organisation):
    with webhook_receiver(failing=2) as receiver:
        secret = make_endpoint(partner_api, receiver.url())["secret"]
        job = make_job(organisation)
        lifecycle.cancel(job)
        wait_for(lambda: len(receiver.posts) == 3, timeout=30, what="three attempts")
    bodies = [verified(post, secret) for post in receiver.posts]
    assert len({body["id"] for body in bodies}) == 1 and bodies[0] == bodies[2], "the same delivery each time"
    gaps = [later.at - earlier.at for earlier, later in zip(receiver.posts, receiver.posts[1:], strict=False)]
    assert gaps[0] >= 0.9 and gaps[1] >= 1.9, f"after 1 s, then 2 s (E31_WEBHOOK_RETRY_SECONDS): {gaps}"
    wait_for(lambda: Delivery.objects.get().status == Delivery.Status.DELIVERED, what="the delivery recorded")
    [logged] = deliveries(partner_api, job)
    assert [(attempt["http_status"], attempt["error"]) for attempt in logged["attempts"]] == [
        (500, "HTTP 500 Internal Server Error"),
        (500, "HTTP 500 Internal Server Error"),
        (204, ""),
    ]
    assert all(attempt["duration_ms"] < 10_000 for attempt in logged["attempts"])


@pytest.mark.django_db(transaction=True)
def test_a_removed_endpoint_hears_nothing_more(fleet, partner_api, organisation):
    with webhook_receiver(failing=100, held=True) as receiver:
        made = make_endpoint(partner_api, receiver.url())
        job = make_job(organisation)
        lifecycle.cancel(job)
        wait_for(lambda: receiver.posts, timeout=20, what="the first attempt")
        # Removed while its first attempt is under way (the receiver holds it), which then fails: no retry follows.
        assert partner_api.delete(f"/api/v1/webhooks/{made['id']}/").status_code == 204
        receiver.release.set()
        wait_for(Attempt.objects.exists, timeout=20, what="the first attempt's outcome")
        later = make_job(organisation)
        lifecycle.cancel(later)
        time.sleep(4)  # past two retries of the shrunk backoff
    assert len(receiver.posts) == 1
    assert Delivery.objects.get().status == Delivery.Status.STOPPED
    assert not Delivery.objects.filter(job=later).exists()


@pytest.mark.django_db(transaction=True)
def test_a_jobs_own_webhook_hears_each_of_its_changes_signed_with_its_own_secret(fleet, partner_api, organisation):
    with webhook_receiver() as receiver, file_server(EXAMPLE.parent) as server:
        body = {
            "work": {"kind": "clean-table"},
            "data": {"location": f"{server}/customers.csv"},
            "request": {"gpus": 1, "hours": 1},
            "webhook_url": receiver.url("/job"),
        }
        answer = partner_api.post("/api/v1/jobs/", body, content_type="application/json")
        assert answer.status_code == 201, answer.content
        secret = answer.json()["webhook_secret"]
        job = wait_for_end(Job.objects.get())
        assert job.state == State.SUCCEEDED, job.error
        wait_for(lambda: len(receiver.posts) == 5, timeout=20, what="a delivery for each change")
    changes = sorted(
        (
            (body["data"]["previous_state"], body["data"]["state"])
            for body in (verified(p, secret) for p in receiver.posts)
        ),
        key=lambda change: list(State).index(change[1]),
    )
    assert changes == [
        ("submitted", "staging"), ("staging", "queued"), ("queued", "running"),
        ("running", "finishing"), ("finishing", "succeeded"),
    ]  # fmt: skip
    assert partner_api.get("/api/v1/webhooks/").json() == [], "a job's own webhook is not the organisation's"


@pytest.mark.django_db(transaction=True)
def test_a_deadline_that_can_no_longer_be_met_is_delivered_once(fleet, partner_api, organisation):
    due = timezone.now() + timedelta(hours=2)
    # Queued and put on hold, so that the live fleet's scheduler leaves it be.
    job = make_job(organisation, State.QUEUED, deadline=due, deadline_feasible=True, on_hold_since=timezone.now())
    with webhook_receiver() as receiver:
        secret = make_endpoint(partner_api, receiver.url())["secret"]
        assert promises.tell(job, due + timedelta(minutes=50), AtRisk.EARLIER_DEADLINE, timezone.now())
        wait_for(lambda: receiver.posts, timeout=20, what="the delivery")
        assert not promises.tell(job, due + timedelta(hours=1), AtRisk.FEWER_GPUS, timezone.now()), "told once"
    [post] = receiver.posts
    body = verified(post, secret)
    assert (post.headers["E31-Event"], body["type"]) == ("job.deadline_at_risk", "job.deadline_at_risk")
    told = body["data"]["job"]["deadline_at_risk"]
    assert (told["reason"], told["expected_finish"]) == ("earlier_deadline", (due + timedelta(minutes=50)).isoformat())
    assert told["message"].startswith(f"Your deadline of {due:%Y-%m-%d %H:%M} UTC can no longer be met: a job with")
    wait_for(lambda: Delivery.objects.get().status == Delivery.Status.DELIVERED, what="the delivery recorded")
    [logged] = deliveries(partner_api, job)
    assert (logged["event"], logged["state"], logged["previous_state"]) == ("job.deadline_at_risk", "queued", "")


@pytest.mark.django_db
def test_another_organisations_endpoint_and_log_are_not_found(partner_api, outsider, organisation):
    made = make_endpoint(partner_api, "http://localhost:9/e31")
    outsider_api = api_client(token_for(outsider))
    assert outsider_api.get("/api/v1/webhooks/").json() == []
    answer = outsider_api.delete(f"/api/v1/webhooks/{made['id']}/")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert Endpoint.objects.filter(removed_at=None).count() == 1
    job = make_job(organisation)
    assert outsider_api.get(f"/api/v1/jobs/{job.pk}/webhooks/").status_code == 404


@pytest.fixture
def pending(organisation, partner_api):
    """A delivery of a job's cancel to an endpoint, recorded as the receiver records it, not yet tried."""

    def make(url: str) -> Delivery:
        make_endpoint(partner_api, url)
        job = make_job(organisation)
        record(job, list(Endpoint.objects.listening_to(job)), State.CANCELLED, State.SUBMITTED, timezone.now())
        return Delivery.objects.get(job=job)

    return make


@pytest.mark.django_db
def test_an_attempt_is_claimed_once_and_a_lapsed_claim_is_taken_over(pending):
    with webhook_receiver() as receiver:
        found = pending(receiver.url())
        Delivery.objects.filter(pk=found.pk).update(lease_until=timezone.now() + timedelta(seconds=60), attempts=1)
        assert delivery.attempt(str(found.pk)) is None, "another worker holds it"
        assert receiver.posts == []
        Delivery.objects.filter(pk=found.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
        assert delivery.attempt(str(found.pk)) == Delivery.Status.DELIVERED, "its worker died: taken over"
        assert delivery.attempt(str(found.pk)) is None, "delivered: a message sent again does nothing"
    assert len(receiver.posts) == 1
    found.refresh_from_db()
    assert (found.attempts, found.claim, found.lease_until) == (2, "", None), "the crashed attempt counts"
    assert list(found.attempt_log.values_list("number", "http_status")) == [(2, 204)]


@pytest.mark.django_db
def test_an_attempt_that_fails_is_due_again_after_the_backoff_and_the_last_gives_up(pending, settings):
    settings.E31_WEBHOOK_RETRY_SECONDS = [60, 300]
    with webhook_receiver(failing=100) as receiver:
        found = pending(receiver.url())
        before = timezone.now()
        assert delivery.attempt(str(found.pk)) == Delivery.Status.PENDING
        found.refresh_from_db()
        assert before + timedelta(seconds=59) < found.next_attempt_at < timezone.now() + timedelta(seconds=61)
        assert delivery.attempt(str(found.pk)) is None, "not due yet"
        for _ in range(2):
            Delivery.objects.filter(pk=found.pk).update(next_attempt_at=timezone.now())
            delivery.attempt(str(found.pk))
    found.refresh_from_db()
    assert (found.status, found.attempts, found.next_attempt_at) == (Delivery.Status.FAILED, 3, None)
    assert len(receiver.posts) == 3


@pytest.mark.django_db
def test_the_sweep_sends_what_has_been_due_a_while_with_no_attempt_under_way(pending, settings):
    found = pending("http://localhost:9/e31")
    assert delivery.sweep() == 0, "a delivery just recorded has its own message"
    Delivery.objects.filter(pk=found.pk).update(next_attempt_at=timezone.now() - timedelta(minutes=2))
    assert delivery.sweep() == 1
    Delivery.objects.filter(pk=found.pk).update(lease_until=timezone.now() + timedelta(seconds=30))
    assert delivery.sweep() == 0, "an attempt is under way"
