"""The intake form keeps what an applicant typed, without the characters that would disguise it."""

import pytest

from portal.models import Application

pytestmark = pytest.mark.django_db


def test_it_stores_an_application_without_invisible_or_direction_changing_characters(client):
    typed = {
        "name": "Ada\u202e ecalevoL",
        "email": "ada@lab\u200b.example",
        "organisation": "\u2066Lab\u2069 of \ufeffEngines\u061c",
        "dataset": "12M cards\r\n\u00adscanned",
        "work": "a clean\u200d table",
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
