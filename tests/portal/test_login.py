"""Logging in, the partners' page and the admin's: wrong passwords lock a username out from one address."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.db.models import F
from django.test import Client

from portal.throttling import client_ip

pytestmark = pytest.mark.django_db

HOME = "10.0.0.1"


def log_in(client, password, username="partner", address=HOME, url="/accounts/login/", **headers):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address, **headers)


def locked_out(response) -> bool:
    page = response.content.decode()
    return response.status_code == 429 and "Too many failed logins" in page


def lock_out(client, username="partner", address=HOME, url="/accounts/login/", **headers):
    for attempt in range(1, 5):
        response = log_in(client, f"guess {attempt}", username, address, url, **headers)
        assert response.status_code == 200 and not locked_out(response), f"attempt {attempt} is only refused"
    return log_in(client, "guess 5", username, address, url, **headers)


def test_it_locks_a_username_out_from_an_address_after_five_wrong_passwords(client, partner):
    assert "didn't match" in log_in(client, "pw-Partner").content.decode()
    for attempt in range(2, 5):
        assert log_in(client, f"guess {attempt}").status_code == 200
    assert not locked_out(log_in(client, "")), "an empty password is refused by the form, not counted"
    assert locked_out(log_in(client, "guess 5")), "the fifth wrong password locks"

    response = log_in(client, "pw-partner")
    page = response.content.decode()
    assert locked_out(response), "the right password is refused too"
    assert "Logging in as <strong>partner</strong> from your address is locked for 15 minutes" in page
    assert "/static/css/portal.css" in page and 'href="/design-partners/"' in page, "in the portal's layout"
    assert client.get("/jobs/").status_code == 302, "not logged in"


def test_it_lets_the_same_username_in_from_another_address(client, partner):
    assert locked_out(lock_out(client))
    response = log_in(Client(), "pw-partner", address="10.0.0.2")
    assert response.status_code == 302 and response["Location"] == "/jobs/"


def test_it_lets_another_username_in_from_the_locked_address(client, partner, teammate):
    assert locked_out(lock_out(client))
    assert log_in(Client(), "pw-teammate", username="teammate").status_code == 302
    assert locked_out(log_in(Client(), "pw-partner")), "a new session is the same person"


def test_it_locks_a_username_that_does_not_exist(client, partner):
    assert locked_out(lock_out(client, username="nobody"))
    assert log_in(client, "pw-partner").status_code == 302


def test_a_login_that_succeeds_starts_the_count_again(client, partner):
    for attempt in range(1, 5):
        log_in(client, f"guess {attempt}")
    assert log_in(client, "pw-partner").status_code == 302
    again = Client()
    for attempt in range(1, 5):
        assert not locked_out(log_in(again, f"guess {attempt}")), "four failures after a success do not lock"
    assert locked_out(log_in(again, "guess 5"))


def test_it_lets_them_in_again_once_the_lockout_minutes_have_passed(client, partner):
    assert locked_out(lock_out(client))
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=15, seconds=1))
    assert log_in(client, "pw-partner").status_code == 302


def test_it_locks_the_admin_login_the_same_way(client, operator):
    url = "/admin/login/?next=/admin/"
    response = lock_out(client, username="operator", url=url)
    assert locked_out(response)
    assert f'href="{url}"' in response.content.decode(), "the way back is to the admin's login"
    assert locked_out(log_in(client, "pw-operator", username="operator", url=url))
    assert client.get("/admin/").status_code == 302
    assert log_in(Client(), "pw-operator", username="operator", address="10.0.0.2", url=url).status_code == 302


def test_it_tells_clients_apart_by_the_address_the_outermost_proxy_saw(client, partner, settings):
    settings.E31_TRUSTED_PROXIES = 1
    proxy = "10.0.0.9"
    assert locked_out(lock_out(client, address=proxy, HTTP_X_FORWARDED_FOR="203.0.113.5"))
    written_by_the_client = "198.51.100.1, 203.0.113.5"
    assert locked_out(log_in(Client(), "pw-partner", address=proxy, HTTP_X_FORWARDED_FOR=written_by_the_client))
    assert log_in(Client(), "pw-partner", address=proxy, HTTP_X_FORWARDED_FOR="203.0.113.6").status_code == 302


@pytest.mark.parametrize(
    ("proxies", "remote", "forwarded", "client"),
    [
        (0, "192.0.2.7", "203.0.113.5", "192.0.2.7"),
        (1, "10.0.0.9", "198.51.100.1, 203.0.113.5", "203.0.113.5"),
        (2, "10.0.0.9", "198.51.100.1, 203.0.113.5, 10.0.0.8", "203.0.113.5"),
        (2, "10.0.0.9", "203.0.113.5", "10.0.0.9"),
        (1, "10.0.0.9", "", "10.0.0.9"),
        (0, "2001:db8:1:2:a:b:c:d", "", "2001:db8:1:2::"),
        (0, "::ffff:192.0.2.7", "", "192.0.2.7"),
        (0, "", "", None),
        (1, "10.0.0.9", "unknown", None),
        (1, "10.0.0.9", "198.51.100.1, 203.0.113.5:51234", "203.0.113.5"),
        (1, "10.0.0.9", "[2001:db8:1:2::9]:443", "2001:db8:1:2::"),
        (1, "10.0.0.9", "[2001:db8:1:2::9]", "2001:db8:1:2::"),
        (1, "10.0.0.9", "2001:db8:1:2::9", "2001:db8:1:2::"),
    ],
)
def test_it_reads_the_client_address(rf, settings, proxies, remote, forwarded, client):
    settings.E31_TRUSTED_PROXIES = proxies
    assert client_ip(rf.post("/accounts/login/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)) == client


def spray(client, usernames: int, address=HOME, url="/accounts/login/"):
    """One wrong password for each of `usernames` accounts, none of them locked on its own; the answers."""
    return [log_in(client, "Winter2026!", f"user{number}", address, url) for number in range(usernames)]


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_one_address_trying_many_usernames_is_locked_out_whatever_username_it_tries(client, partner, url, settings):
    settings.E31_LOGIN_FAILURES_PER_ADDRESS_PER_HOUR = 10
    answers = spray(client, 10, url=url)
    assert not any(locked_out(answer) for answer in answers), "ten failures, each on another account"
    sprayed = log_in(client, "Winter2026!", "user10", url=url)
    assert locked_out(sprayed) and "too many logins failed from it this hour" in sprayed.content.decode()
    assert locked_out(log_in(client, "pw-partner", url=url)), "the right password of another account too"
    assert log_in(Client(), "pw-partner", address="10.0.0.2").status_code == 302, "another address logs in"
