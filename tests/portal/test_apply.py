"""The intake form's limit: so many applications an hour from one address, then 429 with the form kept."""

import pytest
from django.test import Client

from portal.models import Application

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
    assert "too many applications from your address this hour" in page and "send it again in" in page
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
