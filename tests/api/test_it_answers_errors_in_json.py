"""Every error of the API is `{"error": {"code", "message", "field"?}}` with its status (docs/api.md): the
handler's translation of Django REST framework's exceptions, nested fields named with dots; a 400 lists every
value refused in `errors`, the first of them being `field` and `message`."""

import pytest
from django.http import Http404
from rest_framework import exceptions

from api.errors import Conflict, Gone, exception_handler


def error_of(exc) -> tuple[int, dict]:
    response = exception_handler(exc, {})
    return response.status_code, response.data["error"]


NOT_FOUND = "There is no such object in your organisation."
CANCELLED = "Job 4 has ended (succeeded) and can no longer be cancelled."
PARSE = "JSON parse error - Expecting value: line 1 column 1 (char 0)"


@pytest.mark.parametrize(
    ("exc", "status", "error"),
    [
        (
            exceptions.ValidationError({"request": {"gpus": ["Ask for at most 8 GPUs: the fleet has 8."]}}),
            400,
            {
                "code": "invalid",
                "message": "Ask for at most 8 GPUs: the fleet has 8.",
                "field": "request.gpus",
                "errors": [{"field": "request.gpus", "message": "Ask for at most 8 GPUs: the fleet has 8."}],
            },
        ),
        (
            exceptions.ValidationError({"data": [{"location": ["No such file."]}]}),
            400,
            {
                "code": "invalid",
                "message": "No such file.",
                "field": "data.location",
                "errors": [{"field": "data.location", "message": "No such file."}],
            },
        ),
        (
            exceptions.ValidationError(
                {"request": {"gpus": ["Ask for at least one GPU, not 0."], "hours": ["Hours must be a number."]}}
            ),
            400,
            {
                "code": "invalid",
                "message": "Ask for at least one GPU, not 0.",
                "field": "request.gpus",
                "errors": [
                    {"field": "request.gpus", "message": "Ask for at least one GPU, not 0."},
                    {"field": "request.hours", "message": "Hours must be a number."},
                ],
            },
        ),
        (
            exceptions.ValidationError({"non_field_errors": ["Give one of upload or location."]}),
            400,
            {
                "code": "invalid",
                "message": "Give one of upload or location.",
                "errors": [{"message": "Give one of upload or location."}],
            },
        ),
        (exceptions.ParseError(PARSE), 400, {"code": "invalid", "message": PARSE, "errors": [{"message": PARSE}]}),
        (
            exceptions.NotAuthenticated(),
            401,
            {"code": "unauthenticated", "message": "Authentication credentials were not provided."},
        ),
        (Http404("No Job matches the given query."), 404, {"code": "not_found", "message": NOT_FOUND}),
        (Conflict(CANCELLED), 409, {"code": "conflict", "message": CANCELLED}),
        (Gone("Deleted."), 410, {"code": "gone", "message": "Deleted."}),
        (
            exceptions.UnsupportedMediaType("text/plain"),
            415,
            {"code": "unsupported_media_type", "message": 'Unsupported media type "text/plain" in request.'},
        ),
    ],
)
def test_it_writes_each_error_in_one_shape(exc, status, error):
    assert error_of(exc) == (status, error)


def test_it_leaves_other_exceptions_to_django():
    assert exception_handler(ValueError("a bug"), {}) is None


def test_a_route_that_does_not_exist_is_404_in_json(db, partner_api):
    for path in ("/api/v1/nope/", "/api/v1/jobs/abc/", "/api/v2/", "/api/v1/jobs/1/output/"):
        answer = partner_api.get(path)
        assert answer.status_code == 404, path
        assert answer.json()["error"]["code"] == "not_found", path


def test_an_unknown_method_is_405_in_json(db, partner_api):
    answer = partner_api.delete("/api/v1/jobs/")
    assert answer.status_code == 405
    assert answer.json() == {"error": {"code": "method_not_allowed", "message": 'Method "DELETE" not allowed.'}}


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/jobs/?dry_run=1", "/api/v1/webhooks/"])
@pytest.mark.parametrize("body", [DEEP, b'{"a": ' * 50_000 + b"1" + b"}" * 50_000], ids=["arrays", "objects"])
def test_json_nested_past_the_decoders_depth_is_a_400_in_json(db, partner_api, path, body):
    answer = partner_api.post(path, body, content_type="application/json")
    assert answer.status_code == 400, (path, answer.status_code)
    assert answer.json()["error"]["message"] == "JSON parse error - the body is nested too deeply."


def test_a_body_past_what_django_reads_is_a_413_in_json_and_the_pages_keep_theirs(db, partner_api, partner_client):
    big = b'{"work": {"kind": "' + b"x" * 8_000_000 + b'"}}'
    answer = partner_api.post("/api/v1/jobs/", big, content_type="application/json")
    assert (answer.status_code, answer["Content-Type"]) == (413, "application/json")
    assert answer.json() == {
        "error": {
            "code": "too_large",
            "message": "The request body is over 2,560\xa0KiB, more than the API reads; send data as an upload.",
        }
    }
    page = partner_client.post("/jobs/new/", {"name": "x" * 3_000_000})
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
