"""Tokens on the API: `Authorization: Bearer e31_…` acts as its user; a missing, wrong, expired or revoked one
is 401 in the API's JSON, and the token's last use is recorded at most once a minute."""

import hashlib
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from api.models import ApiToken
from tests.api.support import api_client, token_for
from tests.support import client_for


def test_it_makes_tokens_of_e31_and_64_hex_digits_and_keeps_only_their_hash(partner):
    token = token_for(partner)
    assert token.startswith("e31_") and len(token) == 68
    int(token[4:], 16)
    stored = ApiToken.objects.get()
    assert stored.digest == hashlib.sha512(token.encode()).hexdigest()
    assert token not in {str(value) for value in ApiToken.objects.values().get().values()}


def test_it_answers_as_the_tokens_user(partner, organisation):
    answer = api_client(token_for(partner, name="ci")).get("/api/v1/me/")
    assert answer.status_code == 200
    me = answer.json()
    assert me["username"] == "partner"
    assert me["organisation"] == {"name": organisation.name, "slug": organisation.slug}
    assert me["token"]["name"] == "ci"


def test_it_refuses_no_token_a_wrong_one_and_another_scheme_with_401(partner, db):
    token = token_for(partner)
    for client in (
        Client(),
        api_client(token[:-1] + ("0" if token[-1] != "0" else "1")),
        api_client("e31_" + "0" * 64),
        api_client("not-even-a-token"),
        api_client("é31"),
        Client(HTTP_AUTHORIZATION=f"Token {token}"),
        Client(HTTP_AUTHORIZATION="Bearer"),
        Client(HTTP_AUTHORIZATION=f"Bearer {token} extra"),
    ):
        answer = client.get("/api/v1/me/")
        assert answer.status_code == 401, client.defaults
        assert answer.json()["error"]["code"] == "unauthenticated"
        assert answer["WWW-Authenticate"] == "Bearer"


def test_it_refuses_an_expired_token_and_keeps_it_listed(partner):
    token = token_for(partner, days=1)
    ApiToken.objects.update(expiry=timezone.now() - timedelta(seconds=1))
    answer = api_client(token).get("/api/v1/me/")
    assert answer.status_code == 401
    assert "expired" in answer.json()["error"]["message"]
    assert ApiToken.objects.filter(user=partner).exists(), "its owner still sees it, expired, until revoked"


def test_it_refuses_a_revoked_token(partner):
    token = token_for(partner)
    ApiToken.objects.get().delete()
    assert api_client(token).get("/api/v1/me/").status_code == 401


def test_it_refuses_a_token_of_a_deactivated_user(partner):
    token = token_for(partner)
    partner.is_active = False
    partner.save()
    assert api_client(token).get("/api/v1/me/").status_code == 401


def test_it_records_the_last_use_at_most_once_a_minute(partner):
    client = api_client(token_for(partner))
    client.get("/api/v1/me/")
    first = ApiToken.objects.get().last_used_at
    assert first is not None and timezone.now() - first < timedelta(seconds=5)
    client.get("/api/v1/me/")
    assert ApiToken.objects.get().last_used_at == first
    ApiToken.objects.update(last_used_at=first - timedelta(minutes=2))
    client.get("/api/v1/me/")
    assert ApiToken.objects.get().last_used_at > first


def test_a_session_does_not_reach_the_api(partner):
    answer = client_for(partner).get("/api/v1/me/")
    assert answer.status_code == 401


def test_an_operators_token_says_who_it_is_with_no_organisation(operator_api):
    answer = operator_api.get("/api/v1/me/")
    assert answer.status_code == 200
    assert answer.json()["organisation"] is None
