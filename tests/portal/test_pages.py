"""The public pages, the intake form, logging in, and the demo bootstrap."""

import re

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client

from jobs.models import State
from portal.models import Application, Membership
from tests.factories import make_job
from tests.support import client_for, wait_for

pytestmark = pytest.mark.django_db


def test_it_shows_the_landing_and_program_pages(client):
    assert "One heavy pass over a large dataset" in client.get("/").content.decode()
    assert "design-partner program" in client.get("/design-partners/").content.decode()


def test_it_takes_an_application(client):
    response = client.post(
        "/design-partners/apply/",
        {
            "name": "Ada",
            "email": "ada@lab.example",
            "organisation": "Lab",
            "dataset": "40M product descriptions, 120 GB of JSONL",
            "work": "embeddings of every description",
            "gpu_hours": "64",
        },
    )
    assert response.status_code == 302, "a reload of the thanks cannot send it again"
    assert "Thank you, Ada" in client.get(response["Location"]).content.decode()
    application = Application.objects.get()
    assert (application.status, application.gpu_hours) == ("new", 64)
    assert Client().get(response["Location"])["Location"] == "/design-partners/apply/", "the thanks are the sender's"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("email", "not-an-email", "Enter a valid email address."),
        ("gpu_hours", "-4", "greater than or equal to 1"),
        ("gpu_hours", "99999999999999999999", "We plan passes of up to 1,000,000 GPU-hours"),
    ],
)
def test_it_refuses_an_incomplete_application(client, field, value, message):
    data = {"name": "Ada", "email": "ada@lab.example", "organisation": "Lab", "dataset": "x", "work": "y"}
    response = client.post("/design-partners/apply/", {**data, field: value})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Application.objects.exists()


def test_an_accepted_applicant_gets_an_organisation_and_an_account_they_set_a_password_for(operator, mailbox):
    application = Application.objects.create(
        name="Ada", email="Ada@Lab.example", organisation="Ada's Lab", dataset="x", work="y"
    )
    response = client_for(operator).post(
        "/admin/portal/application/", {"action": "accept", "_selected_action": [application.pk]}, follow=True
    )
    application.refresh_from_db()
    assert (application.status, application.reviewed_by) == ("accepted", operator)
    membership = Membership.objects.get(organisation__name="Ada's Lab")
    assert (membership.organisation.slug, membership.user.username) == ("adas-lab", "ada@lab.example")
    assert not membership.user.has_usable_password()
    page = response.content.decode()
    assert "Emailed Ada@Lab.example a link to set a password and log in; it works once, for 3 days." in page
    (sent,) = mailbox.to("Ada@Lab.example")
    assert sent["Subject"] == "Your E31 account: set a password"
    link = re.search(r"http://testserver(/accounts/reset/[^\s<]+/)", sent.get_content())[1]
    assert f"send them the link yourself: http://testserver{link}" in page, "and to the operator, should it not arrive"

    applicant = Client()
    form = applicant.get(link, follow=True)  # Django moves the token into the session, then asks for the password
    assert "Choose the password you will log in with, as ada@lab.example" in form.content.decode()
    chosen = {"new_password1": "a long passphrase 4 Ada", "new_password2": "a long passphrase 4 Ada"}
    assert applicant.post(form.redirect_chain[-1][0], chosen).status_code == 302
    login = {"username": "ada@lab.example", "password": "a long passphrase 4 Ada"}
    assert applicant.post("/accounts/login/", login, follow=True).redirect_chain[-1][0] == "/jobs/"
    assert "Jobs of Ada&#x27;s Lab" in applicant.get("/jobs/").content.decode()
    assert "This link no longer works" in Client().get(link, follow=True).content.decode(), "the link works once"


def test_an_application_is_not_accepted_into_an_organisation_or_account_that_exists(operator, organisation, partner):
    same_name = Application.objects.create(
        name="Eve", email="eve@x.example", organisation=organisation.name.upper(), dataset="x", work="y"
    )
    partner.email = "partner@lab.example"
    partner.save()
    known = Application.objects.create(name="P", email="Partner@Lab.example", organisation="New", dataset="x", work="y")
    response = client_for(operator).post(
        "/admin/portal/application/", {"action": "accept", "_selected_action": [same_name.pk, known.pk]}, follow=True
    )
    page = response.content.decode()
    assert "exists already; if Eve belongs to it, add an account to it by hand" in page
    assert "partner@lab.example has an account already" in page
    assert set(Application.objects.values_list("status", flat=True)) == {"new"}
    assert not Membership.objects.filter(user__username="eve@x.example").exists()
    assert list(organisation.memberships.values_list("user__username", flat=True)) == ["partner"]


def test_staff_who_may_only_view_cannot_review_applications_nor_cancel_jobs(django_user_model, organisation):
    viewer = django_user_model.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename__in=["view_job", "view_application"]))
    client = client_for(viewer)
    application = Application.objects.create(name="Ada", email="a@b.c", organisation="Lab", dataset="x", work="y")
    job = make_job(organisation, State.QUEUED)

    assert client.get("/admin/jobs/job/").status_code == 200, "the operator's view stays open to them"
    client.post("/admin/portal/application/", {"action": "accept", "_selected_action": [application.pk]})
    client.post("/admin/jobs/job/", {"action": "cancel", "_selected_action": [job.pk]})
    application.refresh_from_db()
    job.refresh_from_db()
    assert (application.status, application.reviewed_by, job.state) == ("new", None, "queued")


def test_it_logs_a_partner_in_to_the_jobs_page(client, partner):
    response = client.post("/accounts/login/", {"username": "partner", "password": "pw-partner"})
    assert response.status_code == 302 and response["Location"] == "/jobs/"
    assert client.get("/").status_code == 302


def test_it_keeps_operator_pages_for_staff(partner_client, client):
    assert partner_client.get("/admin/jobs/job/").status_code == 302
    assert client.get("/admin/").status_code == 302


def test_it_tells_a_user_without_organisation_why_there_are_no_jobs(operator):
    response = client_for(operator).get("/jobs/")
    assert response.status_code == 403
    assert "not in a design-partner organisation" in response.content.decode()


def test_it_bootstraps_the_demo_once(capsys):
    call_command("bootstrap_demo")
    first = capsys.readouterr().out
    assert "username operator" in first and "username partner" in first
    call_command("bootstrap_demo")
    assert capsys.readouterr().out == ""
    assert Membership.objects.get(user__username="partner").organisation.slug == "demo"


def test_the_operators_lists_say_what_they_hold_in_words(operator, online_slots, rate_card):
    client = client_for(operator)
    Application.objects.create(name="Ada", email="a@b.c", organisation="Lab", dataset="x", work="y")
    applications = client.get("/admin/portal/application/").content.decode()
    assert "Applicant" in applications and "Your name" not in applications
    nodes = client.get("/admin/jobs/node/").content.decode()
    assert "fake-node" in nodes and 'alt="True"' in nodes, "the fake node is online"
    cards = client.get("/admin/billing/ratecard/").content.decode()
    assert "Rate per GPU-hour" in cards and "Rate per GB staged" in cards


def accept(client, *applications, action="accept"):
    selected = [application.pk for application in applications]
    return client.post("/admin/portal/application/", {"action": action, "_selected_action": selected}, follow=True)


def test_a_new_organisation_never_takes_a_slug_whose_staging_folder_exists(operator, settings):
    left = settings.E31_STAGING_ROOTS[0] / "adas-lab"
    left.mkdir(parents=True)
    try:
        application = Application.objects.create(
            name="Ada", email="ada@lab.example", organisation="Ada's Lab", dataset="x", work="y"
        )
        assert "organisation Ada&#x27;s Lab (adas-lab-2)" in accept(client_for(operator), application).content.decode()
    finally:
        left.rmdir()


def ada() -> Application:
    return Application.objects.create(name="Ada", email="ada@lab.example", organisation="Lab", dataset="x", work="y")


def test_an_applicant_whose_link_went_unused_gets_a_new_one_until_they_set_a_password(operator):
    client, application = client_for(operator), ada()
    accept(client, application)
    page = accept(client, application, action="new_link").content.decode()
    fresh = re.search(r"yourself: http://testserver(/accounts/reset/[^\s<]+/)", page)[1]
    applicant = Client()
    form = applicant.get(fresh, follow=True)
    chosen = {"new_password1": "a long passphrase 4 Ada", "new_password2": "a long passphrase 4 Ada"}
    assert applicant.post(form.redirect_chain[-1][0], chosen).status_code == 302
    assert "ada@lab.example has set a password" in accept(client, application, action="new_link").content.decode()


def test_staff_who_may_not_add_users_cannot_accept_applications(django_user_model):
    reviewer = django_user_model.objects.create_user("reviewer", is_staff=True)
    reviewer.user_permissions.set(Permission.objects.filter(codename__in=["view_application", "change_application"]))
    application = Application.objects.create(
        name="Ada", email="ada@lab.example", organisation="Lab", dataset="x", work="y"
    )
    accept(client_for(reviewer), application)
    application.refresh_from_db()
    assert application.status == "new" and not Membership.objects.exists()


def test_the_operator_is_told_to_send_the_link_when_it_cannot_be_emailed(operator, mailbox, settings):
    settings.EMAIL_PORT = 9  # nothing listens there
    application = Application.objects.create(
        name="Bo", email="bo@lab.example", organisation="Bo Lab", dataset="x", work="y"
    )
    page = accept(client_for(operator), application).content.decode()
    assert "Could not email bo@lab.example: send them this link to set a password and log in" in page
    assert re.search(r"for 3 days: http://testserver/accounts/reset/[^\s<]+/", page)
    assert not mailbox.messages


def test_without_a_mail_server_the_email_is_written_to_the_output_never_to_the_log(operator, settings, caplog, capsys):
    settings.E31_EMAIL_HOST = ""  # the README's make run: EMAIL_BACKEND is the console's
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    application = Application.objects.create(
        name="Cy", email="cy@lab.example", organisation="Cy Lab", dataset="x", work="y"
    )
    page = accept(client_for(operator), application).content.decode()
    assert (
        "No mail server is set (E31_EMAIL_HOST): the email to cy@lab.example was written to the portal&#x27;s" in page
    )
    link = re.search(r"for 3 days: (http://testserver/accounts/reset/[^\s<]+/)", page)[1]
    printed = capsys.readouterr().out
    assert "To: cy@lab.example" in printed and link in printed, "the applicant's email, as every email is"
    assert "/accounts/reset/" not in caplog.text, "a log file never holds a working link"


def test_an_applications_page_accepts_declines_and_sends_a_new_link(operator, mailbox):
    console = client_for(operator)
    ada = Application.objects.create(name="Ada", email="ada@lab.example", organisation="Lab", dataset="x", work="y")
    page = console.get(f"/admin/portal/application/{ada.pk}/change/").content.decode()
    assert ">Accept</button>" in page and ">Decline</button>" in page and "new set-password link" not in page
    accepted = console.post(
        "/admin/portal/application/", {"action": "accept", "_selected_action": [ada.pk]}, follow=True
    )
    assert "Emailed ada@lab.example a link to set a password" in accepted.content.decode()
    page = console.get(f"/admin/portal/application/{ada.pk}/change/").content.decode()
    assert ">Send a new set-password link</button>" in page and ">Accept</button>" not in page
    again = console.post(
        "/admin/portal/application/", {"action": "new_link", "_selected_action": [ada.pk]}, follow=True
    )
    assert "Emailed ada@lab.example a link" in again.content.decode()
    wait_for(lambda: len(mailbox.to("ada@lab.example")) == 2, what="the two set-password emails")


@pytest.mark.parametrize("count, said", [(1, "Declined 1 application."), (2, "Declined 2 applications.")])
def test_declining_counts_the_applications_in_words(operator, count, said):
    chosen = [
        Application.objects.create(name=f"N{n}", email=f"n{n}@x.example", organisation=f"L{n}", dataset="x", work="y")
        for n in range(count)
    ]
    form = {"action": "decline", "_selected_action": [application.pk for application in chosen]}
    response = client_for(operator).post("/admin/portal/application/", form, follow=True)
    assert said in response.content.decode()
    assert set(Application.objects.values_list("status", flat=True)) == {"declined"}
