"""Deny by default, as on the pages: every route that names an object answers 404 for one of another
organisation, the lists show only the organisation's own, and an operator's token (staff, in no organisation)
reaches no job at all (403). ROUTES must name every route of the API: a new one fails the first test until it
is added here."""

import json

import pytest
from django.urls import get_resolver

from tests.api.support import api_client, token_for

# Each route that names an object: how it is asked for, given the job's id.
ROUTES = {
    "job": ("get", "/api/v1/jobs/{pk}/"),
    "events": ("get", "/api/v1/jobs/{pk}/events/"),
    "manifest": ("get", "/api/v1/jobs/{pk}/manifest/"),
    "output_file": ("get", "/api/v1/jobs/{pk}/output/output.parquet"),
    "cancel": ("post", "/api/v1/jobs/{pk}/cancel/"),
    "receipt": ("get", "/api/v1/jobs/{pk}/receipt/"),
    "estimate": ("get", "/api/v1/jobs/{pk}/estimate/"),
    "pass": ("post", "/api/v1/jobs/{pk}/pass/"),
    "job_webhooks": ("get", "/api/v1/jobs/{pk}/webhooks/"),
    "ledger": ("get", "/api/v1/ledger/?job={pk}"),
    "ledger_csv": ("get", "/api/v1/ledger.csv?job={pk}"),
    "ledger_json": ("get", "/api/v1/ledger.json?job={pk}"),
}
# The organisation's lists, which show its own objects only.
LISTS = {"jobs": "/api/v1/jobs/", "webhooks": "/api/v1/webhooks/"}
# Routes naming an upload or a webhook endpoint: test_it_isolates_what_it_makes.py.
MADE = {"uploads", "upload", "webhook"}
# Routes about no organisation's objects.
PUBLIC = {"index", "schema", "docs", "no_such_route"}
ANY_TOKEN = {"me", "work_kinds"}

pytestmark = pytest.mark.django_db


def test_every_route_of_the_api_is_listed_here():
    names = {pattern.name for pattern in get_resolver("api.urls").url_patterns}
    assert names == set(ROUTES) | set(LISTS) | MADE | PUBLIC | ANY_TOKEN


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_an_object_of_another_organisation_is_404(route, finished_job, outsider_api, teammate):
    method, path = ROUTES[route]
    path = path.format(pk=finished_job.pk)
    answer = getattr(outsider_api, method)(path)
    assert answer.status_code == 404, answer.content
    assert answer.json()["error"] == {
        "code": "not_found",
        "message": f"There is no job {finished_job.pk} in your organisation.",
    }, "as for a job that does not exist"
    owner = getattr(api_client(token_for(teammate)), method)(path)
    assert owner.status_code in (200, 409), f"the organisation reaches it: {owner.status_code}"


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_an_object_that_does_not_exist_is_404(route, partner_api):
    method, path = ROUTES[route]
    answer = getattr(partner_api, method)(path.format(pk=999_999))
    assert answer.status_code == 404
    assert answer.json() == {"error": {"code": "not_found", "message": "There is no job 999999 in your organisation."}}


@pytest.mark.parametrize("route", sorted(ROUTES) + sorted(LISTS))
def test_an_operators_token_reaches_no_job(route, finished_job, operator_api):
    method, path = ROUTES.get(route) or ("get", LISTS[route])
    answer = getattr(operator_api, method)(path.format(pk=finished_job.pk))
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "forbidden"
    assert "not in an organisation" in answer.json()["error"]["message"]


def test_the_lists_show_the_organisations_own_only(finished_job, outsider_api, partner_api):
    assert outsider_api.get("/api/v1/jobs/").json()["count"] == 0
    assert outsider_api.get("/api/v1/ledger/").json()["count"] == 0
    assert json.loads(outsider_api.get("/api/v1/ledger.json").getvalue())["entries"] == []
    assert partner_api.get("/api/v1/jobs/").json()["results"][0]["id"] == finished_job.pk
    assert partner_api.get("/api/v1/ledger/").json()["count"] == 1
