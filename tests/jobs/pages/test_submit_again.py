"""Submit again: an ended job's page leads to the job form filled in as the job asked, and what cannot be
filled in (an upload, credentials, a model no longer kept) is named."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from jobs import lifecycle
from jobs.models import Job
from tests.support import EXAMPLE, job_form

pytestmark = pytest.mark.django_db

ASKED = {
    "work": "clean-table",
    "param-clean-table-type_threshold": "0.9",
    "param-clean-table-types": "age:int",
    "gpus": "3",
    "hours": "2.5",
    "shape": "long-narrow",
    "retention": "keep",
    "keep_days": "4",
    "output_days": "9",
    "allow_partial": "on",
}


def ended_job(client, location: str = "") -> Job:
    form = job_form(**ASKED)
    if location:
        form.pop("data")
        form["location"] = location
    assert client.post("/jobs/new/", form).status_code == 302
    job = Job.objects.latest("pk")
    assert lifecycle.cancel(job)
    job.refresh_from_db()
    return job


def form_as_filled(response) -> dict:
    """What the browser would send back of the form as the page filled it in."""
    sent = {}
    for field in response.context["form"]:
        value = field.value()
        if value in (None, "", False) or field.widget_type == "clearablefile":
            continue
        sent[field.html_name] = "on" if value is True else str(value)
    return sent


def test_a_job_submitted_again_asks_what_it_asked(partner_client, online_slots):
    first = ended_job(partner_client)
    page = partner_client.get(f"/jobs/{first.pk}/").content.decode()
    assert f'href="/jobs/new/?again={first.pk}">Submit again</a>' in page

    response = partner_client.get(f"/jobs/new/?again={first.pk}")
    assert response.status_code == 200
    shown = response.content.decode()
    assert f'As <a href="/jobs/{first.pk}/">job #{first.pk}</a> asked' in shown
    assert "Choose the dataset again (customers.csv): an upload is not kept for a new job." in shown
    sent = form_as_filled(response)
    assert {name: sent.get(name) for name in ASKED} == ASKED | {"gpus": "1", "hours": "7.50"}, "3 × 2.5 h, long-narrow"

    sent["data"] = SimpleUploadedFile("customers.csv", EXAMPLE.read_bytes(), content_type="text/csv")
    assert partner_client.post("/jobs/new/", sent).status_code == 302
    again = Job.objects.latest("pk")
    asked = ("work", "params", "gpus", "hours", "shape", "retention_days", "output_keep_days", "allow_partial")
    assert again.pk != first.pk
    assert {name: getattr(again, name) for name in asked} == {name: getattr(first, name) for name in asked}


def test_a_location_is_filled_in_and_a_presigned_url_is_asked_again(partner_client, online_slots, settings):
    url = "http://localhost:9/customers.csv"
    first = ended_job(partner_client, location=url)
    assert form_as_filled(partner_client.get(f"/jobs/new/?again={first.pk}"))["location"] == url

    secret = ended_job(partner_client, location="http://localhost:9/customers.csv?X-Amz-Signature=hunter2")
    response = partner_client.get(f"/jobs/new/?again={secret.pk}")
    assert "location" not in form_as_filled(response)
    shown = response.content.decode()
    assert "hunter2" not in shown
    assert "location again (http://localhost:9/customers.csv?…): its credentials are not kept." in shown


def test_a_running_job_has_no_submit_again_and_outsiders_and_junk_get_404(
    partner_client, outsider_client, online_slots
):  # fmt: skip
    assert partner_client.post("/jobs/new/", job_form()).status_code == 302
    running = Job.objects.get()
    assert "Submit again" not in partner_client.get(f"/jobs/{running.pk}/").content.decode()
    for again in [str(running.pk), "abc", "-1", "", "1e3", "99999999999999999999"]:
        if again != str(running.pk):
            assert partner_client.get(f"/jobs/new/?again={again}").status_code == 404, again
        assert outsider_client.get(f"/jobs/new/?again={again}").status_code == 404, again
