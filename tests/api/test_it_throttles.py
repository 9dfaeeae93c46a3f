"""E31_API_RATE per token on every route: past it, 429 with Retry-After and the API's error body. Counted in the
shared cache (Redis), per token: another token, of the same user too, has its own count. Creating jobs
(E31_API_SUBMIT_RATE) is counted per organisation."""

from types import SimpleNamespace

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from api.models import ApiToken
from api.throttling import SubmitRate, TokenRate
from portal.env import env_rate
from tests.api.support import api_client, token_for

pytestmark = pytest.mark.django_db


def test_past_the_rate_it_answers_429_with_retry_after(partner, settings):
    settings.E31_API_RATE = "3/min"
    client = api_client(token_for(partner))
    assert [client.get("/api/v1/jobs/").status_code for _ in range(3)] == [200, 200, 200]
    answer = client.get("/api/v1/me/")
    assert answer.status_code == 429
    assert 1 <= int(answer["Retry-After"]) <= 60
    error = answer.json()["error"]
    assert error["code"] == "throttled"
    assert error["message"] == f"Too many requests: try again in {answer['Retry-After']} seconds."
    assert api_client(token_for(partner, name="other")).get("/api/v1/me/").status_code == 200


def test_the_public_pages_are_not_counted(partner, settings, db):
    settings.E31_API_RATE = "1/min"
    client = api_client(token_for(partner))
    assert [client.get("/api/v1/").status_code for _ in range(3)] == [200, 200, 200]
    assert client.get("/api/v1/me/").status_code == 200


@pytest.mark.parametrize("value", ["120", "120/fortnight", "0/min", "-1/min", "ten/min", "120 / min"])
def test_a_wrong_rate_stops_the_start(monkeypatch, value):
    monkeypatch.setenv("E31_API_RATE", value)
    with pytest.raises(ImproperlyConfigured, match="E31_API_RATE must be a count per period"):
        env_rate("E31_API_RATE", "120/min")


def test_creating_jobs_has_a_rate_of_its_own(partner, settings):
    """SubmitRate, for the routes that create jobs: E31_API_SUBMIT_RATE, counted apart from E31_API_RATE."""
    settings.E31_API_RATE, settings.E31_API_SUBMIT_RATE = "100/min", "2/hour"
    token_for(partner)
    request = SimpleNamespace(auth=ApiToken.objects.get(), user=partner, META={}, method="POST")
    assert all(SubmitRate().allow_request(request, None) for _ in range(5)), "asking is not making a job"
    for _ in range(2):
        SubmitRate().made(request)
    refused = SubmitRate()
    assert not refused.allow_request(request, None)
    assert 3500 < refused.wait() <= 3600
    assert request.e31_limit == "jobs made by one organisation (E31_API_SUBMIT_RATE is 2 per hour)"
    assert TokenRate().allow_request(request, None), "the rate of every route is counted apart"


def test_the_rate_of_creating_jobs_is_the_organisations_whichever_token_is_used(partner, teammate, settings):
    settings.E31_API_SUBMIT_RATE = "2/hour"

    def posting(user, name: str) -> SimpleNamespace:
        token_for(user, name=name)
        return SimpleNamespace(auth=ApiToken.objects.get(user=user, name=name), user=user, META={}, method="POST")

    first, second, teammates = posting(partner, "laptop"), posting(partner, "server"), posting(teammate, "laptop")
    SubmitRate().made(first)
    SubmitRate().made(second)
    for request in (first, second, teammates):
        assert not SubmitRate().allow_request(request, None), "a new token starts no new count"


def test_requests_without_a_valid_token_are_counted_per_address(partner, settings):
    """A missing token, a wrong one and the public pages share the address's count; past it, 429 rather than
    401. A valid token from the same address is not held up, and another address has its own count."""
    settings.E31_API_ADDRESS_RATE = "4/min"
    nobody, wrong = Client(), api_client("e31_" + "x" * 40)
    answers = [
        nobody.get("/api/v1/jobs/", REMOTE_ADDR="10.0.0.7").status_code,
        wrong.get("/api/v1/jobs/", REMOTE_ADDR="10.0.0.7").status_code,
        nobody.get("/api/v1/", REMOTE_ADDR="10.0.0.7").status_code,
        wrong.get("/api/v1/me/", REMOTE_ADDR="10.0.0.7").status_code,
    ]
    assert answers == [401, 401, 200, 401]
    for client, path in [(wrong, "/api/v1/me/"), (nobody, "/api/v1/jobs/"), (nobody, "/api/v1/docs/")]:
        answer = client.get(path, REMOTE_ADDR="10.0.0.7")
        assert answer.status_code == 429, path
        assert 1 <= int(answer["Retry-After"]) <= 60
    assert wrong.get("/api/v1/me/", REMOTE_ADDR="10.0.0.7").json()["error"]["code"] == "throttled"
    assert api_client(token_for(partner)).get("/api/v1/me/", REMOTE_ADDR="10.0.0.7").status_code == 200
    assert wrong.get("/api/v1/me/", REMOTE_ADDR="10.0.0.8").status_code == 401
