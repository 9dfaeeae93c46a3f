"""A sample through the API, its estimate and the full pass it sized: the estimate is the page's (JobFacts), the
pass takes the sample's staged copy over; a job that is no finished sample is a conflict, in the page's words."""

import html
import re

import pytest
from django.core.management import CommandError, call_command

from jobs.facts import JobFacts
from jobs.models import Job, State
from tests.api.loopback import upload
from tests.datasets import csv_bytes
from tests.factories import finished_sample, make_job
from tests.support import wait_for_end

SECONDS_PER_BATCH = "0.2"  # test-slow-echo: 50 records a batch, so at most 250 records a second


@pytest.fixture(scope="module")
def gpuworker(sampling_gpuworker):
    """This module's slots: samples stop after 3 s, passes are cut into shards of 1 s of work."""
    return sampling_gpuworker


def post(client, path: str, body: dict):
    return client.post(path, body, content_type="application/json")


@pytest.mark.django_db(transaction=True)
def test_a_sample_sizes_its_pass_and_the_pass_runs_on_its_staged_copy(fleet, partner_api, rate_card):
    data = upload(partner_api, csv_bytes(4000), name="records.csv")
    made = post(
        partner_api,
        "/api/v1/jobs/",
        {
            "work": {"kind": "test-slow-echo", "params": {"seconds_per_batch": SECONDS_PER_BATCH}},
            "data": {"upload": data},
            "request": {"gpus": 2, "hours": 3},
            "retention": {"staged_days": 3},
            "sample": True,
        },
    )
    assert made.status_code == 201, made.content
    sample = wait_for_end(Job.objects.get(pk=made.json()["id"]))
    assert sample.state == State.SUCCEEDED, sample.error

    estimate = partner_api.get(f"/api/v1/jobs/{sample.pk}/estimate/?gpus=2").json()
    facts = JobFacts(sample)
    expected = facts.estimate(2)
    assert estimate["estimate"]["gpus"] == 2
    assert (estimate["estimate"]["hours"], estimate["estimate"]["gpu_hours"]) == (
        str(expected.hours), str(expected.gpu_hours),
    )  # fmt: skip
    assert estimate["estimate"]["cost"] == str(expected.cost) and estimate["estimate"]["currency"] == "USD"
    assert [shape["gpus"] for shape in estimate["shapes"]] == [shape.gpus for shape in facts.shapes]
    assert estimate["shapes"][0]["shape"] == "wide"
    assert estimate["measured"]["records_per_second"] == sample.sample_result["records_per_second"]
    planned = partner_api.get(f"/api/v1/jobs/{sample.pk}/estimate/").json()["estimate"]
    assert planned["gpus"] == facts.planned_pass.gpus, "without gpus: the GPUs asked for with the sample"

    passed = post(
        partner_api,
        f"/api/v1/jobs/{sample.pk}/pass/",
        {"request": {"gpus": 2, "hours": estimate["estimate"]["hours"]}, "retention": {"staged_days": 0}},
    )
    assert passed.status_code == 201, passed.content
    assert passed["Location"] == f"/api/v1/jobs/{passed.json()['id']}/"
    full = wait_for_end(Job.objects.get(pk=passed.json()["id"]))
    assert full.state == State.SUCCEEDED, full.error
    assert (full.sample_id, full.gpus, full.records_out) == (sample.pk, 2, 4000)
    staging = list(full.events.filter(state=State.STAGING).values_list("message", flat=True))
    assert staging == [f"taking over the staged copy of sample {sample.pk}"], "one step, and not staged again"

    again = post(partner_api, f"/api/v1/jobs/{sample.pk}/pass/", {"request": {"gpus": 1, "hours": 1}})
    assert again.status_code == 409
    assert again.json()["error"]["message"].startswith(f"The staged copy of sample {sample.pk} is gone")


@pytest.mark.django_db
def test_a_job_that_is_no_finished_sample_is_a_conflict(partner_api, organisation, online_slots):
    for job in (make_job(organisation, State.SUCCEEDED), make_job(organisation, State.RUNNING, kind=Job.Kind.SAMPLE)):
        estimate = partner_api.get(f"/api/v1/jobs/{job.pk}/estimate/")
        assert estimate.status_code == 409
        refusal = "This job is not a finished sample, so it sized no pass."
        assert estimate.json()["error"] == {"code": "conflict", "message": refusal}
        passed = post(partner_api, f"/api/v1/jobs/{job.pk}/pass/", {"request": {"gpus": 1, "hours": 1}})
        assert passed.status_code == 409
        assert passed.json()["error"] == estimate.json()["error"], "before the body is read"
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_an_estimate_needs_a_whole_number_of_gpus(partner_api, organisation, online_slots):
    sample = make_job(
        organisation,
        State.SUCCEEDED,
        kind=Job.Kind.SAMPLE,
        sample_result={"records_per_second": 100.0, "records_total": 10_000, "startup_seconds": 1.0},
    )
    for gpus in ("0", "two", "-1", "1.5"):
        answer = partner_api.get(f"/api/v1/jobs/{sample.pk}/estimate/?gpus={gpus}")
        assert answer.status_code == 400
        assert answer.json()["error"]["field"] == "gpus"
        assert answer.json()["error"]["message"] == f"Give a whole number of CPU slots, not '{gpus}'."
    assert partner_api.get(f"/api/v1/jobs/{sample.pk}/estimate/?gpus=3").json()["estimate"]["gpus"] == 3


@pytest.mark.django_db
def test_an_estimate_on_more_gpus_than_the_fleet_has_is_refused_as_the_pass_would_be(
    partner_api, organisation, online_slots
):  # fmt: skip
    sample = finished_sample(organisation)
    answer = partner_api.get(f"/api/v1/jobs/{sample.pk}/estimate/?gpus=5")
    assert answer.status_code == 400
    refusal = {"code": "invalid", "field": "gpus", "message": "The fleet has 4 CPU slots online; ask for 4 or fewer."}
    assert {name: answer.json()["error"][name] for name in refusal} == refusal
    passed = post(partner_api, f"/api/v1/jobs/{sample.pk}/pass/", {"request": {"gpus": 5, "hours": 1}})
    assert passed.json()["error"]["message"] == refusal["message"]


@pytest.mark.django_db
def test_a_pass_is_refused_in_the_services_words(partner_api, organisation, online_slots):
    sample = make_job(
        organisation,
        State.SUCCEEDED,
        kind=Job.Kind.SAMPLE,
        staged_path="jobs/1/input/records.csv",
        sample_result={"records_per_second": 100.0, "records_total": 10_000},
    )
    answer = post(partner_api, f"/api/v1/jobs/{sample.pk}/pass/", {"request": {"gpus": 9, "hours": 1}})
    assert answer.status_code == 400
    fewer = "The fleet has 4 CPU slots online; ask for 4 or fewer."
    assert answer.json()["error"] == {
        "code": "invalid",
        "message": fewer,
        "field": "request.gpus",
        "errors": [{"field": "request.gpus", "message": fewer}],
    }
    every = {"request": {"gpus": 0, "hours": "x", "deadline": "soon"}, "retention": {"staged_days": 500}}
    refused = post(partner_api, f"/api/v1/jobs/{sample.pk}/pass/", every).json()["error"]["errors"]
    assert [refusal["field"] for refusal in refused] == [
        "request.gpus", "request.hours", "request.deadline", "retention.staged_days",
    ]  # fmt: skip
    assert Job.objects.count() == 1


def test_a_pass_after_a_sample_that_ran_over_every_record_is_refused_at_every_door(
    partner_api, partner_client, organisation, partner, online_slots
):
    sample = finished_sample(organisation)
    sample.sample_result = {**sample.sample_result, "records": 36_000}  # every one of its 36,000 records
    sample.save()
    said = f"Sample {sample.pk} ran over every record: its output is the whole result; no pass is needed."
    answer = post(partner_api, f"/api/v1/jobs/{sample.pk}/pass/", {"request": {"gpus": 1, "hours": 1}})
    assert answer.status_code == 409, "as for any job that is no sample to pass from"
    assert answer.json()["error"]["message"] == said
    page = partner_client.post(f"/jobs/{sample.pk}/pass/", {"gpus": "1", "hours": "1", "retention": "delete"})
    assert said in html.unescape(page.content.decode())
    with pytest.raises(CommandError, match=re.escape(f"Refused: {said}")):
        call_command("submit", "--org", organisation.slug, "--as", partner.username, "--from-sample", str(sample.pk),
                     "--gpus", "1", "--hours", "1")  # fmt: skip
    assert Job.objects.count() == 1, "nothing made, nothing billed"
