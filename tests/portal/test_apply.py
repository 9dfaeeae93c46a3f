"""The intake form's limit: so many applications an hour from one address, then 429 with the form kept."""

import pytest
from django.test import Client

from portal.models import Application
from portal.throttling import PostsPerHour

pytestmark = pytest.mark.django_db

HOME = "10.0.0.1"
ADA = {"name": "Ada", "email": "ada@lab.example", "organisation": "Lab", "dataset": "x", "work": "y"}


def apply(client, data, address=HOME, **headers):
    return client.post("/design-partners/apply/", data, REMOTE_ADDR=address, **headers)


def use_up_the_hour(client, address=HOME, **headers):
    """Ten posts, valid and not: each counts."""
    for number in range(10):
        data = {**ADA, "email": f"ada{number}@lab.example"} if number % 2 else {**ADA, "email": "not-an-email"}
        assert apply(client, data, address, **headers).status_code in (302, 400), f"post {number + 1} is taken"


def test_it_refuses_the_eleventh_post_in_an_hour_and_keeps_what_was_typed(client):
    use_up_the_hour(client)
    typed = {
        "name": "Grace <Hopper>",
        "email": "grace@navy.example",
        "organisation": "Navy Lab",
        "dataset": "12M punch cards, scanned",
        "work": "a clean table of every card",
        "gpu_hours": "48",
    }
    response = apply(client, typed)
    page = response.content.decode()
    assert response.status_code == 429
    assert "too many applications from your address in the last hour" in page and "send it again in" in page
    assert 'value="Grace &lt;Hopper&gt;"' in page and 'value="grace@navy.example"' in page
    assert 'value="Navy Lab"' in page and 'value="48"' in page
    assert "12M punch cards, scanned</textarea>" in page and "a clean table of every card</textarea>" in page
    assert not Application.objects.filter(email="grace@navy.example").exists()
    assert Application.objects.count() == 5


def test_it_takes_the_next_post_from_another_address(client):
    use_up_the_hour(client)
    assert apply(client, ADA).status_code == 429
    assert apply(Client(), ADA, address="10.0.0.2").status_code == 302


def test_it_counts_posts_not_visits(client):
    for _ in range(12):
        assert client.get("/design-partners/apply/", REMOTE_ADDR=HOME).status_code == 200
    assert apply(client, ADA).status_code == 302


def test_it_counts_the_client_behind_the_proxy(client, settings):
    settings.E31_TRUSTED_PROXIES = 1
    use_up_the_hour(client, address="10.0.0.9", HTTP_X_FORWARDED_FOR="203.0.113.5")
    assert apply(client, ADA, address="10.0.0.9", HTTP_X_FORWARDED_FOR="198.51.100.1, 203.0.113.5").status_code == 429
    assert apply(client, ADA, address="10.0.0.9", HTTP_X_FORWARDED_FOR="203.0.113.6").status_code == 302


def test_it_takes_the_limit_from_the_settings(client, settings):
    settings.E31_INTAKE_POSTS_PER_HOUR = 2
    assert [apply(client, ADA).status_code for _ in range(3)] == [302, 302, 429]


def test_it_takes_applications_while_the_cache_is_unreachable(client, settings, tmp_path):
    settings.CACHES = {
        **settings.CACHES,
        "default": {**settings.CACHES["default"], "LOCATION": f"unix://{tmp_path / 'no-redis.sock'}"},
    }
    for _ in range(11):
        assert apply(client, ADA).status_code == 302
    assert Application.objects.count() == 11


def test_it_counts_an_ipv6_client_by_its_56(client):
    use_up_the_hour(client, address="2001:db8:1:2::9")
    assert apply(client, ADA, address="2001:db8:1:3::9").status_code == 429, "another /64 of the same /56"
    assert apply(client, ADA, address="2001:db8:1:100::9").status_code == 302


class Clock:
    """The limit's clock, set by the test: an hour cannot be waited out in a test."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_it_counts_any_hour_not_the_clocks_hour(client, monkeypatch):
    clock = Clock(3000.0)  # 00:50, ten minutes before a clock hour turns
    monkeypatch.setattr(PostsPerHour, "timer", clock)
    for minute in range(10):
        clock.now = 3000.0 + 60 * minute
        assert apply(client, {**ADA, "email": f"ada{minute}@lab.example"}).status_code == 302
    clock.now = 3660.0  # 01:01: a new clock hour, but ten posts in the last one
    refused = apply(client, ADA)
    assert refused.status_code == 429
    assert "send it again in 49 minutes" in refused.content.decode()  # when the post of 00:50 is an hour old
    clock.now = 6601.0
    assert apply(client, ADA).status_code == 302
    clock.now = 6602.0
    assert apply(client, ADA).status_code == 429, "the post of 00:51 is still in the hour"


def test_a_refused_post_does_not_move_the_wait(client, monkeypatch):
    clock = Clock(0.0)
    monkeypatch.setattr(PostsPerHour, "timer", clock)
    use_up_the_hour(client)
    for second in range(1, 50):
        clock.now = float(second * 60)
        assert apply(client, ADA).status_code == 429
    clock.now = 3601.0
    assert apply(client, ADA).status_code == 302


@pytest.mark.parametrize("field", ["dataset", "work"])
def test_it_refuses_a_description_past_its_length_and_keeps_it(client, field):
    response = apply(client, {**ADA, field: "x" * 4001})
    page = response.content.decode()
    assert response.status_code == 400
    assert "Ensure this value has at most 4000 characters (it has 4001)." in page
    assert "x" * 4001 in page
    assert not Application.objects.exists()
    assert apply(client, {**ADA, field: "x" * 4000}).status_code == 302
