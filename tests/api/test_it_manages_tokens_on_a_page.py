"""The "API tokens" page: a partner makes a token (shown once, stored hashed), sees theirs with last use and
expiry, and revokes one with a POST that needs the CSRF token; another user's token cannot be revoked."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from api.models import ApiToken
from tests.api.support import api_client, token_for
from tests.support import client_for

pytestmark = pytest.mark.django_db
TOKEN = re.compile(r"e31_[0-9a-f]{64}")


def test_it_makes_a_token_and_shows_it_once(partner):
    client = client_for(partner)
    answer = client.post("/account/tokens/", {"name": "laptop", "expiry_days": "30"})
    assert answer.status_code == 200
    assert answer["Cache-Control"].startswith("max-age=0") and "no-store" in answer["Cache-Control"]
    shown = TOKEN.findall(answer.content.decode())
    assert len(shown) == 1
    stored = ApiToken.objects.get(user=partner)
    assert stored.name == "laptop" and stored.token_key == shown[0][:15]
    assert timedelta(days=29, hours=23) < stored.expiry - timezone.now() <= timedelta(days=30)
    assert api_client(shown[0]).get("/api/v1/me/").status_code == 200
    again = client.get("/account/tokens/").content.decode()
    assert not TOKEN.search(again), "never shown again"
    assert "laptop" in again and f"{stored.token_key}…" in again
    assert f"{stored.expiry:%Y-%m-%d %H:%M} UTC" in again


def test_it_lists_last_use_and_expiry(partner):
    token = token_for(partner, name="ci", days=1)
    api_client(token).get("/api/v1/me/")
    token_for(partner, name="old", days=1)
    ApiToken.objects.filter(name="old").update(expiry=timezone.now() - timedelta(days=1))
    page = client_for(partner).get("/account/tokens/").content.decode()
    used = ApiToken.objects.get(name="ci").last_used_at
    assert f"{used:%Y-%m-%d %H:%M} UTC" in page
    assert '<span class="state failed">expired</span>' in page


def test_a_token_without_expiry_lasts(partner):
    client_for(partner).post("/account/tokens/", {"name": "server", "expiry_days": ""})
    assert ApiToken.objects.get().expiry is None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"name": "", "expiry_days": ""}, "This field is required."),
        ({"name": "\u200b\u200b", "expiry_days": ""}, "This field is required."),
        ({"name": "x" * 101, "expiry_days": ""}, "at most 100 characters"),
        ({"name": "ci", "expiry_days": "0"}, "greater than or equal to 1"),
        ({"name": "ci", "expiry_days": "366"}, "less than or equal to 365"),
        ({"name": "ci", "expiry_days": "١٢"}, "Enter a whole number."),
        ({"name": "ci", "expiry_days": "1.5"}, "Enter a whole number."),
    ],
)
def test_it_refuses_a_bad_name_or_expiry(partner, fields, words):
    answer = client_for(partner).post("/account/tokens/", fields)
    assert answer.status_code == 400
    assert words in answer.content.decode()
    assert not ApiToken.objects.exists()


def test_it_revokes_a_token(partner):
    token = token_for(partner, name="laptop")
    client = client_for(partner)
    answer = client.post("/account/tokens/revoke/", {"token": ApiToken.objects.get().digest}, follow=True)
    assert "The token “laptop” is revoked" in answer.content.decode()
    assert not ApiToken.objects.exists()
    assert api_client(token).get("/api/v1/me/").status_code == 401


def test_revoking_needs_the_csrf_token(partner):
    token_for(partner)
    client = Client(enforce_csrf_checks=True)
    client.force_login(partner)
    assert client.post("/account/tokens/revoke/", {"token": ApiToken.objects.get().digest}).status_code == 403
    assert client.post("/account/tokens/", {"name": "sneaky"}).status_code == 403
    assert ApiToken.objects.count() == 1
    page = client.get("/account/tokens/").content.decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    digest = ApiToken.objects.get().digest
    assert client.post("/account/tokens/revoke/", {"token": digest, "csrfmiddlewaretoken": csrf}).status_code == 302
    assert not ApiToken.objects.exists()


def test_another_users_token_cannot_be_revoked_nor_seen(partner, teammate, outsider):
    token_for(teammate, name="teammates-token")
    digest = ApiToken.objects.get().digest
    for someone in (partner, outsider):
        client = client_for(someone)
        assert client.post("/account/tokens/revoke/", {"token": digest}).status_code == 404
        assert "teammates-token" not in client.get("/account/tokens/").content.decode()
    assert ApiToken.objects.count() == 1


def test_revoking_is_a_post(partner):
    token_for(partner)
    assert client_for(partner).get(f"/account/tokens/revoke/?token={ApiToken.objects.get().digest}").status_code == 405


def test_it_asks_to_log_in_and_refuses_users_in_no_organisation(operator, db):
    assert Client().get("/account/tokens/")["Location"].startswith("/accounts/login/")
    assert client_for(operator).get("/account/tokens/").status_code == 403
    assert client_for(operator).post("/account/tokens/", {"name": "ops"}).status_code == 403
    assert not ApiToken.objects.exists()


def test_the_navigation_links_to_it(partner):
    assert 'href="/account/tokens/">API tokens</a>' in client_for(partner).get("/jobs/").content.decode()
