"""Organisation isolation: every job URL answers 404 to anyone outside the job's organisation."""

import pytest

from jobs.models import State
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(organisation, partner):
    return make_job(
        organisation, State.SUCCEEDED, created_by=partner, source_name="customers.csv", output_path="jobs/1/output-x"
    )


def urls(job):
    return [
        f"/jobs/{job.pk}/",
        f"/jobs/{job.pk}/progress/",
        f"/jobs/{job.pk}/output/",
        f"/jobs/{job.pk}/output/output.parquet",
        f"/jobs/{job.pk}/output/manifest.json",
    ]


def test_it_answers_404_to_an_outsider_on_every_job_url(job, outsider_client):
    for url in urls(job):
        assert outsider_client.get(url).status_code == 404, url
    assert outsider_client.post(f"/jobs/{job.pk}/cancel/").status_code == 404


def test_it_answers_404_to_an_operator_outside_the_organisation(job, operator):
    client = client_for(operator)
    for url in urls(job):
        assert client.get(url).status_code == 404, url


def test_it_shows_the_job_to_a_teammate(job, teammate):
    client = client_for(teammate)
    assert client.get(f"/jobs/{job.pk}/").status_code == 200


def test_it_does_not_cancel_another_organisations_job(organisation, outsider_client, partner):
    queued = make_job(organisation, State.QUEUED)
    assert outsider_client.post(f"/jobs/{queued.pk}/cancel/").status_code == 404
    queued.refresh_from_db()
    assert queued.state == State.QUEUED


def test_it_lists_only_the_organisations_own_jobs(job, outsider_client, partner_client):
    assert f"/jobs/{job.pk}/" in partner_client.get("/jobs/").content.decode()
    assert f"/jobs/{job.pk}/" not in outsider_client.get("/jobs/").content.decode()


def test_it_sends_anonymous_visitors_to_log_in(job, client):
    for url in urls(job):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url
