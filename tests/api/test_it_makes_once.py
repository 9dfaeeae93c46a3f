"""Idempotency-Key on every API create (jobs, passes, uploads, webhooks): the same key and request again answer
as the first did, status and body, and make nothing; the key with another request is a 409; a request sent
while the first is still being answered waits for its answer; a refusal frees the key; keys are the
organisation's and kept a day."""

import json
import threading
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from api.webhooks.models import Endpoint
from jobs.models import Job, Upload
from portal import idempotency
from portal.models import RequestKey
from tests.api.loopback import TUS, b64
from tests.api.support import api_client, token_for
from tests.api.test_it_makes_jobs import job_body
from tests.factories import finished_sample


def post(client, path: str, body: dict, key: str | None, **headers):
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    return client.post(path, body, content_type="application/json", **headers)


def test_a_job_sent_twice_with_one_key_is_made_once_and_answered_the_same(partner_api, online_slots):
    key = str(uuid.uuid4())
    first = post(partner_api, "/api/v1/jobs/", job_body(), key)
    again = post(partner_api, "/api/v1/jobs/", job_body(), key)
    assert first.status_code == again.status_code == 201, again.content
    assert again.json() == first.json()
    assert again["Location"] == first["Location"]
    assert again["Idempotent-Replayed"] == "true" and not first.has_header("Idempotent-Replayed")
    assert Job.objects.count() == 1


def test_the_same_object_in_another_order_or_spacing_is_the_same_request(partner_api, online_slots):
    key = "retry-1"
    assert post(partner_api, "/api/v1/jobs/", job_body(), key).status_code == 201
    body = dict(reversed(job_body().items()))
    again = partner_api.post(
        "/api/v1/jobs/", json.dumps(body, indent=4), content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
    )  # fmt: skip
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1


def test_a_key_sent_with_another_request_is_a_conflict_and_makes_nothing(partner_api, online_slots):
    assert post(partner_api, "/api/v1/jobs/", job_body(), "k").status_code == 201
    other = post(partner_api, "/api/v1/jobs/", job_body(request={"gpus": 2, "hours": "1"}), "k")
    assert other.status_code == 409
    assert other.json()["error"]["message"] == (
        "This Idempotency-Key was sent with a different request: use a new key for a new request."
    )
    assert Job.objects.count() == 1


def test_a_refused_request_frees_its_key_for_the_corrected_one(partner_api, online_slots):
    refused = post(partner_api, "/api/v1/jobs/", job_body(request={"gpus": 0, "hours": "1"}), "fix-me")
    assert refused.status_code == 400
    fixed = post(partner_api, "/api/v1/jobs/", job_body(), "fix-me")
    assert fixed.status_code == 201 and not fixed.has_header("Idempotent-Replayed")
    assert Job.objects.count() == 1


def test_a_dry_run_keeps_no_answer_under_its_key(partner_api, online_slots):
    checked = post(partner_api, "/api/v1/jobs/?dry_run=1", job_body(), "dry")
    assert checked.status_code == 200
    assert not RequestKey.objects.exists()


@pytest.mark.parametrize("key", ["", " ", "x" * 256, "clé", "tab\there"])
def test_a_key_that_is_not_visible_ascii_is_refused(partner_api, online_slots, key):
    answer = partner_api.post(
        "/api/v1/jobs/", job_body(), content_type="application/json", headers={"Idempotency-Key": key}
    )
    assert answer.status_code == 400, answer.content
    assert "Idempotency-Key is 1 to 255 visible ASCII characters" in answer.json()["error"]["message"]
    assert not Job.objects.exists()


def test_keys_are_the_organisations(partner_api, outsider, online_slots):
    assert post(partner_api, "/api/v1/jobs/", job_body(), "shared-name").status_code == 201
    theirs = post(api_client(token_for(outsider)), "/api/v1/jobs/", job_body(), "shared-name")
    assert theirs.status_code == 201 and not theirs.has_header("Idempotent-Replayed")
    assert Job.objects.count() == 2
    assert theirs.json()["id"] != Job.objects.order_by("pk").first().pk


def test_a_key_is_forgotten_after_a_day(partner_api, online_slots):
    assert post(partner_api, "/api/v1/jobs/", job_body(), "old").status_code == 201
    RequestKey.objects.update(created=timezone.now() - timedelta(days=1, seconds=1))
    again = post(partner_api, "/api/v1/jobs/", job_body(), "old")
    assert again.status_code == 201 and not again.has_header("Idempotent-Replayed")
    assert Job.objects.count() == 2
    RequestKey.objects.update(created=timezone.now() - timedelta(days=2))
    assert idempotency.purge() == 1 and not RequestKey.objects.exists()


def test_an_upload_a_webhook_and_a_pass_sent_twice_are_made_once(partner_api, organisation, online_slots):
    metadata = {"HTTP_UPLOAD_LENGTH": "10", "HTTP_UPLOAD_METADATA": f"filename {b64(b'a.csv')}", **TUS}
    first = partner_api.post("/api/v1/uploads/", HTTP_IDEMPOTENCY_KEY="u", **metadata)
    again = partner_api.post("/api/v1/uploads/", HTTP_IDEMPOTENCY_KEY="u", **metadata)
    assert first.status_code == again.status_code == 201
    assert again["Location"] == first["Location"] and again["Idempotent-Replayed"] == "true"
    assert Upload.objects.count() == 1

    hook = {"url": "http://localhost:9/e31"}
    first, again = (post(partner_api, "/api/v1/webhooks/", hook, "w") for _ in range(2))
    assert first.status_code == again.status_code == 201
    assert again.json()["secret"] == first.json()["secret"], "the answer as it was, its secret too"
    assert Endpoint.objects.count() == 1

    sample = finished_sample(organisation)
    body = {"request": {"gpus": 1, "hours": "1"}}
    first, again = (post(partner_api, f"/api/v1/jobs/{sample.pk}/pass/", body, "p") for _ in range(2))
    assert first.status_code == again.status_code == 201, again.content
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.filter(sample=sample).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_double_send_at_once_makes_one_job_and_both_hear_of_it(partner, online_slots):
    token = token_for(partner)
    answers = []

    def send():
        answers.append(post(api_client(token), "/api/v1/jobs/", job_body(), "double-click"))

    senders = [threading.Thread(target=send) for _ in range(2)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    assert [answer.status_code for answer in answers] == [201, 201], [answer.content for answer in answers]
    assert answers[0].json()["id"] == answers[1].json()["id"] == Job.objects.get().pk


@pytest.mark.django_db(transaction=True)
def test_a_request_sent_while_the_first_is_in_flight_waits_for_its_answer(partner, partner_api, online_slots, settings):
    first = post(partner_api, "/api/v1/jobs/", job_body(), "first")
    kept = idempotency.Claim(idempotency.Found.ANSWERED, RequestKey.objects.get()).answer
    # The same key and request again, as if the first were still being answered: the claim unanswered.
    RequestKey.objects.update(answer="")
    answers = []
    waiting = threading.Thread(
        target=lambda: answers.append(post(api_client(token_for(partner)), "/api/v1/jobs/", job_body(), "first"))
    )
    waiting.start()
    idempotency.answer(idempotency.Claim(idempotency.Found.NEW, RequestKey.objects.get()), kept)
    waiting.join()
    assert answers[0].status_code == 201 and answers[0].json() == first.json()
    assert Job.objects.count() == 1

    settings.E31_IDEMPOTENCY_WAIT_SECONDS = 1
    RequestKey.objects.update(answer="")  # a first request that broke part-way: never run twice
    stuck = post(partner_api, "/api/v1/jobs/", job_body(), "first")
    assert stuck.status_code == 409
    assert "has not been answered: try again in a minute" in stuck.json()["error"]["message"]
    assert Job.objects.count() == 1
