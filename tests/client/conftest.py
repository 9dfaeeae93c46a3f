"""The client against a real portal: `manage.py runserver` on loopback, on the tests' database and
Redis, with the real gpuworker of the `fleet` fixture, and the installed `e31` run as a partner runs
it (`python -m e31`, in a folder of its own, with its config and cache folders of its own). The
pieces are in world.py."""

import os

import pytest

from api.models import ApiToken
from tests.client.world import E31, RATES, Portal, running_portal
from tests.support import SHARED


@pytest.fixture(scope="module")
def portal(django_db_setup, redis_server) -> Portal:
    """The portal on loopback, shared by the modules that ask for it (tests/conftest.py's Shared)."""
    return SHARED.get("portal", lambda: running_portal(**RATES))


@pytest.fixture
def token(partner, rate_card, transactional_db) -> str:
    """An API token of the partner, made as the tokens page makes one (knox: stored hashed, shown once)."""
    _, token = ApiToken.objects.create(user=partner, name="tests/client")
    return token


@pytest.fixture
def e31(tmp_path, portal, token) -> E31:
    """The command as a partner runs it on their machine: the portal and token in E31_URL and E31_TOKEN,
    config and cache folders of its own (its uploads in progress), nothing of the tests' Django."""
    folder = tmp_path / "partner"
    folder.mkdir()
    env = {name: value for name, value in os.environ.items() if not name.startswith(("DJANGO_", "E31_"))}
    env.update(
        E31_URL=portal.url,
        E31_TOKEN=token,
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        COLUMNS="100",
    )
    return E31(folder, env)
