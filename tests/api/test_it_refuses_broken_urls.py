"""A URL that is not one (an IPv6 bracket opened and never closed, or closed with none open) is refused with a
sentence wherever a partner can give one: the data's and the model's location and the job's webhook on the API
and the job form, and a webhook endpoint. Python's urlsplit raises on these, which was a 500."""

import shutil

import pytest
from django.conf import settings

from jobs.models import Job
from portal.text import redacted
from tests.support import job_form

pytestmark = pytest.mark.django_db

# Those urlsplit raises on, and one it reads (a host of ::1 and a stray bracket), which the guard refuses.
BROKEN = ["http://[::1/h", "https://[2001:db8::1/data.csv", "http://a]b/data.csv", "https://[::1]]/x"]


@pytest.fixture
def on_the_server(organisation):
    """A dataset on the server, in the organisation's own folder: data every check passes."""
    folder = settings.E31_STAGING_ROOTS[0] / organisation.slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.csv").write_bytes(b"id,text\n1,one\n")
    yield str(folder / "data.csv")
    shutil.rmtree(settings.E31_STAGING_ROOTS[0])


def create(client, location: str, **parts):
    body = {"work": {"kind": "clean-table"}, "data": {"location": location}, "request": {"gpus": 1, "hours": 1}}
    return client.post("/api/v1/jobs/", {**body, **parts}, content_type="application/json")


@pytest.mark.parametrize("url", BROKEN)
@pytest.mark.parametrize(
    "parts",
    [
        ("data.location", lambda url: {"data": {"location": url}}),
        ("work.model_location", lambda url: {"work": {"kind": "onnx-infer", "model_location": url}}),
        ("webhook_url", lambda url: {"webhook_url": url}),
    ],
    ids=["data location", "model location", "job webhook"],
)
def test_the_api_refuses_a_broken_url_in_json(partner_api, online_slots, on_the_server, url, parts):
    field, given = parts
    response = create(partner_api, on_the_server, **given(url))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["field"], error["code"]) == (field, "invalid"), error
    assert "IPv6" in error["message"] or "not a public address" in error["message"], error
    assert not Job.objects.exists()


@pytest.mark.parametrize("url", BROKEN)
def test_a_webhook_endpoint_with_a_broken_url_is_refused(partner_api, url):
    response = partner_api.post("/api/v1/webhooks/", {"url": url}, content_type="application/json")
    assert response.status_code == 400, response.content
    message = response.json()["error"]["message"]
    assert "IPv6" in message or "not a public address" in message, message


@pytest.mark.parametrize("url", BROKEN)
def test_the_job_form_refuses_a_broken_location(partner_client, online_slots, url):
    form = job_form(location=url)
    del form["data"]
    response = partner_client.post("/jobs/new/", form)
    assert response.status_code == 400
    said = " ".join(response.context["form"].errors["location"])
    assert "an IPv6 address goes whole between [ and ]" in said or "not a public address" in said, said
    assert not Job.objects.exists()


@pytest.mark.parametrize("url", BROKEN[:3])
def test_a_broken_url_is_shown_without_what_may_follow_its_query_mark(url):
    assert redacted(f"{url}?X-Amz-Signature=secret") == url
