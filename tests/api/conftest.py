"""The API's fixtures: a token for a persona, and a test client that sends it (real HTTP through Django's
test client, the database real). The client helper is tested against a live server elsewhere."""

from datetime import timedelta

import pytest
from django.test import Client

from api.models import ApiToken


def token_for(user, name: str = "laptop", days: int | None = None) -> str:
    _, token = ApiToken.objects.create(user, expiry=days and timedelta(days=days), name=name)
    return token


def api_client(token: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def partner_api(partner) -> Client:
    return api_client(token_for(partner))


@pytest.fixture
def outsider_api(outsider) -> Client:
    return api_client(token_for(outsider))


@pytest.fixture
def operator_api(operator) -> Client:
    return api_client(token_for(operator))
