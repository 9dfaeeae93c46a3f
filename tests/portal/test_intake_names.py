"""The intake form keeps what an applicant typed, without the characters that would disguise it."""

import pytest

from portal.models import Application
from tests.support import client_for

pytestmark = pytest.mark.django_db


def test_it_stores_an_application_without_invisible_or_direction_changing_characters(client):
    typed = {
        "name": "Ada\u202e ecalevoL",
        "email": "ada@lab\u200b.example",
        "organisation": "\u2066Lab\u2069 of \ufeffEngines\u061c",
        "dataset": "12M cards\r\n\u00adscanned",
        "work": "a clean\u2060 table",
    }
    assert client.post("/design-partners/apply/", typed).status_code == 302
    application = Application.objects.get()
    assert (application.name, application.email, application.organisation) == (
        "Ada ecalevoL",
        "ada@lab.example",
        "Lab of Engines",
    )
    assert (application.dataset, application.work) == ("12M cards\nscanned", "a clean table")


def test_it_refuses_a_name_made_only_of_invisible_characters(client):
    typed = {"name": "\u202e\u200b", "email": "a@lab.example", "organisation": "Lab", "dataset": "x", "work": "y"}
    response = client.post("/design-partners/apply/", typed)
    assert response.status_code == 400
    assert "This field is required." in response.content.decode()
    assert not Application.objects.exists()


def test_an_operator_s_edits_are_cleaned_too(operator, organisation):
    client = client_for(operator)
    typed = {
        "name": "Partner\u202e Lab\u200b",
        "slug": "partner-lab",
        "share_weight": "1",
        "memberships-TOTAL_FORMS": "0",
    }
    typed |= {"memberships-INITIAL_FORMS": "0", "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000"}
    response = client.post(f"/admin/portal/organisation/{organisation.pk}/change/", typed)
    assert response.status_code == 302, response.content.decode()
    organisation.refresh_from_db()
    assert organisation.name == "Partner Lab"


def test_an_operator_s_edits_of_an_application_are_cleaned(operator):
    application = Application.objects.create(
        name="Ada", email="a@lab.example", organisation="Lab", dataset="x", work="y"
    )
    typed = {
        "name": "Ada\u2066",
        "email": "a@lab.example",
        "organisation": "Lab\ufeff",
        "dataset": "x\u200b",
        "work": "y",
    }
    response = client_for(operator).post(
        f"/admin/portal/application/{application.pk}/change/", {**typed, "status": "new"}
    )
    assert response.status_code == 302, response.content.decode()
    application.refresh_from_db()
    assert (application.name, application.organisation, application.dataset) == ("Ada", "Lab", "x")
