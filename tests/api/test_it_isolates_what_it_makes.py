"""Deny by default on the routes that make things: a job, sample, upload or webhook endpoint of another
organisation is 404 (or, named as a job's data, as good as none), and an operator's token reaches none (403).
ROUTES has the shape of test_it_isolates_organisations.py's, to join it there; ROUTES_OF_MINE names this
branch's routes, so that a new one fails the first test until it is listed."""

import pytest
from django.urls import get_resolver

from jobs.models import State
from tests.api.conftest import api_client, token_for
from tests.api.loopback import TUS, upload
from tests.factories import make_job
from tests.support import EXAMPLE

# Each route that names a job: how it is asked for, given the job's id.
ROUTES = {
    "estimate": ("get", "/api/v1/jobs/{pk}/estimate/"),
    "pass": ("post", "/api/v1/jobs/{pk}/pass/"),
    "job_webhooks": ("get", "/api/v1/jobs/{pk}/webhooks/"),
}
# The routes that name another object, or none (tested below).
OTHERS = {"jobs", "uploads", "upload", "webhooks", "webhook"}
ROUTES_OF_MINE = set(ROUTES) | OTHERS
FOUNDATION = {"index", "schema", "docs", "me", "no_such_route"}

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished_job(organisation, partner):
    return make_job(organisation, State.SUCCEEDED, created_by=partner)


def test_every_route_of_the_api_is_listed_here():
    names = {pattern.name for pattern in get_resolver("api.urls").url_patterns}
    assert names - FOUNDATION == ROUTES_OF_MINE


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_an_object_of_another_organisation_is_404(route, finished_job, outsider_api, teammate):
    method, path = ROUTES[route]
    path = path.format(pk=finished_job.pk)
    answer = getattr(outsider_api, method)(path)
    assert answer.status_code == 404, answer.content
    assert answer.json()["error"]["code"] == "not_found"
    owner = getattr(api_client(token_for(teammate)), method)(path)
    assert owner.status_code in (200, 409), f"the organisation reaches it: {owner.status_code}"


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_an_object_that_does_not_exist_is_404(route, partner_api):
    method, path = ROUTES[route]
    answer = getattr(partner_api, method)(path.format(pk=999_999))
    assert answer.status_code == 404
    assert answer.json() == {"error": {"code": "not_found", "message": "There is no such object in your organisation."}}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_an_operators_token_reaches_no_job(route, finished_job, operator_api):
    method, path = ROUTES[route]
    answer = getattr(operator_api, method)(path.format(pk=finished_job.pk))
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "forbidden"


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
