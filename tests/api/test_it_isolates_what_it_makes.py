"""Deny by default on the routes that make things: a sample, upload or webhook endpoint of another organisation
is 404, and an operator's token makes none (403). The routes that name a job are in
test_it_isolates_organisations.py, with the list of every route."""

import pytest

from jobs.models import State
from tests.api.loopback import TUS, upload
from tests.factories import make_job
from tests.support import EXAMPLE

pytestmark = pytest.mark.django_db


def test_a_sample_of_another_organisation_is_404(organisation, outsider_api):
    sample = make_job(organisation, State.SUCCEEDED, kind="sample", sample_result={"records_per_second": 10.0})
    assert outsider_api.get(f"/api/v1/jobs/{sample.pk}/estimate/").status_code == 404
    body = {"request": {"gpus": 1, "hours": 1}}
    answer = outsider_api.post(f"/api/v1/jobs/{sample.pk}/pass/", body, content_type="application/json")
    assert answer.status_code == 404
    assert sample.passes.count() == 0


def test_an_upload_of_another_organisation_is_not_found(partner_api, outsider_api):
    url = f"/api/v1/uploads/{upload(partner_api, EXAMPLE.read_bytes())}/"
    assert outsider_api.head(url, **TUS).status_code == 404
    assert outsider_api.delete(url, **TUS).status_code == 404
    assert partner_api.head(url, **TUS).status_code == 200


def test_an_endpoint_of_another_organisation_is_404(partner_api, outsider_api, operator_api):
    made = partner_api.post("/api/v1/webhooks/", {"url": "http://localhost:9/e31"}, content_type="application/json")
    url = f"/api/v1/webhooks/{made.json()['id']}/"
    assert outsider_api.delete(url).status_code == 404
    assert outsider_api.get("/api/v1/webhooks/").json() == []
    assert operator_api.delete(url).status_code == 403
    assert operator_api.get("/api/v1/webhooks/").status_code == 403
    assert len(partner_api.get("/api/v1/webhooks/").json()) == 1


def test_an_operators_token_makes_no_job(operator_api):
    body = {"work": {"kind": "clean-table"}, "data": {"location": "http://localhost/a.csv"}, "request": {"gpus": 1}}
    answer = operator_api.post("/api/v1/jobs/", body, content_type="application/json")
    assert answer.status_code == 403
