"""Resumable uploads over the API: /api/v1/uploads/ is the portal's tus endpoint with the token in place of the
session. Every tus behaviour holds (offsets, checksums, termination); the upload's Location is under the API;
a session is refused, a token needs no CSRF token, and another organisation's upload is not found."""

import hashlib

import pytest
from django.test import Client

from jobs.models import Upload
from tests.api.loopback import TUS, create_upload, send_chunk, upload
from tests.api.support import api_client, token_for
from tests.support import EXAMPLE, client_for

pytestmark = pytest.mark.django_db

DATA = EXAMPLE.read_bytes()


def test_it_says_what_it_supports(partner_api):
    answer = partner_api.options("/api/v1/uploads/")
    assert answer.status_code == 204
    assert answer["Tus-Version"] == "1.0.0"
    assert "checksum" in answer["Tus-Extension"].split(",")
    assert "sha256" in answer["Tus-Checksum-Algorithm"].split(",")


def test_it_takes_a_file_in_checksummed_chunks_at_a_location_under_the_api(partner_api, partner, organisation):
    created = create_upload(partner_api, len(DATA))
    assert created.status_code == 201
    url = created["Location"]
    found = Upload.objects.get()
    assert url == f"/api/v1/uploads/{found.pk}/"
    assert (found.organisation, found.created_by, found.filename) == (organisation, partner, "customers.csv")
    assert created["Upload-Expires"] and created["Tus-Resumable"] == "1.0.0"
    assert send_chunk(partner_api, url, 0, DATA[:100_000]).status_code == 204
    head = partner_api.head(url, **TUS)
    assert (head.status_code, head["Upload-Offset"], head["Upload-Length"]) == (200, "100000", str(len(DATA)))
    assert send_chunk(partner_api, url, 100_000, DATA[100_000:]).status_code == 204
    found.refresh_from_db()
    assert found.complete and found.path.read_bytes() == DATA


def test_a_chunk_whose_checksum_fails_is_refused_and_leaves_the_upload_as_it_was(partner_api):
    url = create_upload(partner_api, len(DATA))["Location"]
    refused = send_chunk(partner_api, url, 0, DATA[:5000], checksum=hashlib.sha256(b"other").digest())
    assert refused.status_code == 460
    assert "checksum does not match" in refused.content.decode()
    assert partner_api.head(url, **TUS)["Upload-Offset"] == "0"
    assert send_chunk(partner_api, url, 10, DATA[10:20]).status_code == 409, "only at the confirmed offset"


def test_it_keeps_the_protocols_answers(partner_api):
    missing_version = partner_api.post("/api/v1/uploads/", HTTP_UPLOAD_LENGTH="10")
    assert missing_version.status_code == 412 and missing_version["Tus-Version"] == "1.0.0"
    assert create_upload(partner_api, 0).status_code == 400
    url = create_upload(partner_api, len(DATA))["Location"]
    wrong_type = partner_api.generic("PATCH", url, b"x", content_type="text/plain", HTTP_UPLOAD_OFFSET="0", **TUS)
    assert wrong_type.status_code == 415


def test_it_discards_an_upload(partner_api):
    url = create_upload(partner_api, len(DATA))["Location"]
    path = Upload.objects.get().path
    assert partner_api.delete(url, **TUS).status_code == 204
    assert not Upload.objects.exists() and not path.exists()


def test_a_token_needs_no_csrf_token(partner):
    strict = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {token_for(partner)}")
    assert create_upload(strict, len(DATA)).status_code == 201


def test_a_session_or_no_token_is_refused_with_401_in_json(partner):
    for client in (client_for(partner), Client()):
        answer = create_upload(client, len(DATA))
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthenticated"
    assert not Upload.objects.exists()
    page = client_for(partner).post("/jobs/uploads/", HTTP_UPLOAD_LENGTH=str(len(DATA)), **TUS)
    assert page["Location"].startswith("/jobs/uploads/"), "the pages' endpoint keeps its own routes"


def test_another_organisations_upload_is_not_found(partner_api, outsider):
    upload_id = upload(partner_api, DATA)
    url = f"/api/v1/uploads/{upload_id}/"
    outsider_api = api_client(token_for(outsider))
    assert outsider_api.head(url, **TUS).status_code == 404
    assert send_chunk(outsider_api, url, len(DATA), b"").status_code == 404
    assert outsider_api.delete(url, **TUS).status_code == 404
    assert Upload.objects.filter(pk=upload_id).exists()


def test_an_operators_token_makes_no_upload(operator_api):
    answer = create_upload(operator_api, len(DATA))
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "forbidden"
