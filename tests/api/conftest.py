"""The API's fixtures: a token for a persona, and a test client that sends it (real HTTP through Django's
test client, the database real). The client helper is tested against a live server elsewhere."""

import pytest
from django.test import Client

from jobs.models import Job
from tests.api.support import api_client, finished, token_for


@pytest.fixture
def partner_api(partner) -> Client:
    return api_client(token_for(partner))


@pytest.fixture
def outsider_api(outsider) -> Client:
    return api_client(token_for(outsider))


@pytest.fixture
def operator_api(operator) -> Client:
    return api_client(token_for(operator))


@pytest.fixture
def finished_job(organisation, partner) -> Job:
    return finished(organisation, created_by=partner)
