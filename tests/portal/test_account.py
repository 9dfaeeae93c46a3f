"""The account page, logging in by email, where an operator lands, the application form's status, the favicon."""

import pytest
from django.test import Client

from portal.models import Application, Membership
from tests.support import client_for

pytestmark = pytest.mark.django_db


def log_in(username, password, **data):
    typed = {"username": username, "password": password, **data}
    return Client().post("/accounts/login/", typed, REMOTE_ADDR="10.0.0.5")


def test_it_shows_who_is_logged_in_their_organisation_and_its_members(partner, teammate, outsider):
    page = client_for(partner).get("/account/").content.decode()
    assert "Logged in as</dt><dd>partner</dd>" in page
    assert 'href="/accounts/password_change/"' in page and 'href="/account/tokens/"' in page
    assert "partner (you)" in page and "teammate" in page
    assert outsider.username not in page, "another organisation's members are not shown"
    assert "/static/css/portal.css" in page, "in the portal's own layout"


def test_it_asks_a_visitor_to_log_in():
    assert Client().get("/account/")["Location"].startswith("/accounts/login/")


def test_a_partner_changes_their_password_in_the_portals_layout(partner):
    client = client_for(partner)
    form = client.get("/accounts/password_change/").content.decode()
    assert "Change your password" in form and "/static/css/portal.css" in form
    new = "a new passphrase 42"
    changed = {"old_password": "pw-partner", "new_password1": new, "new_password2": new}
    assert client.post("/accounts/password_change/", changed, follow=True).status_code == 200
    assert log_in("partner", new).status_code == 302
    assert log_in("partner", "pw-partner").status_code == 200, "the old one no longer works"


@pytest.mark.parametrize("typed", ["partner@lab.example", "Partner@Lab.Example", " partner@lab.example"])
def test_a_partner_logs_in_with_their_email(partner, typed):
    partner.email = "partner@lab.example"
    partner.save()
    response = log_in(typed, "pw-partner")
    assert response.status_code == 302 and response["Location"] == "/jobs/"


@pytest.mark.parametrize(
    ("username", "password"), [("partner@lab.example", "wrong"), ("nobody@lab.example", "pw-partner")]
)
def test_a_wrong_email_or_password_is_refused(partner, username, password):
    partner.email = "partner@lab.example"
    partner.save()
    response = log_in(username, password)
    assert response.status_code == 200
    assert "That username or email and password didn't match" in response.content.decode()


def test_an_email_two_accounts_share_logs_neither_in(partner, teammate):
    for user in (partner, teammate):
        user.email = "shared@lab.example"
        user.save()
    assert log_in("shared@lab.example", "pw-partner").status_code == 200
    assert log_in("partner", "pw-partner").status_code == 302, "the username still does"


def test_the_login_page_asks_for_a_username_or_email_and_offers_a_forgotten_password(client):
    page = client.get("/accounts/login/").content.decode()
    assert ">Username or email</label>" in page and 'href="/accounts/password_reset/">Forgot password?</a>' in page


def test_an_operator_lands_in_the_console(operator):
    operator.set_password("pw-operator")
    operator.save()
    response = log_in(operator.username, "pw-operator")
    assert response.status_code == 302 and response["Location"] == "/admin/"
    onward = log_in(operator.username, "pw-operator", next="/admin/jobs/job/")
    assert onward["Location"] == "/admin/jobs/job/", "unless they were on their way somewhere"


def test_a_staff_member_of_an_organisation_lands_on_its_jobs(operator, organisation):
    operator.set_password("pw-operator")
    operator.save()
    Membership.objects.create(user=operator, organisation=organisation)
    assert log_in(operator.username, "pw-operator")["Location"] == "/jobs/"


def test_an_application_cannot_be_accepted_in_its_form(operator):
    application = Application.objects.create(name="Ada", email="a@b.example", organisation="Lab", dataset="x", work="y")
    client = client_for(operator)
    url = f"/admin/portal/application/{application.pk}/change/"
    form = client.get(url).content.decode()
    assert 'value="accepted"' not in form and "use the Accept action" in form
    fields = {"name": "Ada", "email": "a@b.example", "organisation": "Lab", "dataset": "x", "work": "y"}
    response = client.post(url, {**fields, "status": "accepted"})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    application.refresh_from_db()
    assert application.status == "new"
    assert client.post(url, {**fields, "status": "declined"}).status_code == 302


def test_an_accepted_application_keeps_its_status(operator):
    application = Application.objects.create(
        name="Ada", email="a@b.example", organisation="Lab", dataset="x", work="y", status="accepted"
    )
    form = client_for(operator).get(f"/admin/portal/application/{application.pk}/change/").content.decode()
    assert 'name="status"' not in form and "Accepted" in form


def test_the_favicon_answers(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
    assert client.get(response["Location"]).status_code == 200
