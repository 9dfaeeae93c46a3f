"""A 429 is waited out (its Retry-After) and asked again, a bounded number of times: the library
against a portal the tests start with a rate of two requests a second per token."""

import e31
import pytest

from tests.client.world import running_portal
from tests.support import wait_for


@pytest.fixture(scope="module")
def slow_portal(django_db_setup, redis_server):
    with running_portal(E31_API_RATE="2/s") as started:
        yield started


def test_it_waits_out_each_429_and_gets_its_answer(slow_portal, token):
    mark = len(slow_portal.lines())
    with e31.Client(slow_portal.url, token) as portal:
        answers = [portal.me()["username"] for _ in range(6)]
    assert answers == ["partner"] * 6

    def statuses() -> list[str] | None:
        """The answers' statuses in the portal's log, once it has its six 200s: it logs each after answering."""
        found = [line.split('" ')[1].split()[0] for line in slow_portal.requests("GET", "/api/v1/me/", after=mark)]
        return found if found.count("200") >= 6 else None

    logged = wait_for(statuses, what="six 200s in the portal's log")
    assert logged.count("200") == 6 and "429" in logged


def test_it_gives_up_past_its_bound_with_the_portals_429(slow_portal, token):
    with e31.Client(slow_portal.url, token, max_throttled=0) as portal, pytest.raises(e31.APIError) as refused:
        for _ in range(6):
            portal.me()
    assert (refused.value.status, refused.value.code) == (429, "throttled")
