"""A failure is one line: the portal's sentence from its JSON error, or what an answer without one says; a
refusal of several values a line for each."""

import json

import httpx
from e31.errors import APIError, error_from, error_line, error_lines


def test_it_reads_the_portals_error_body():
    body = b'{"error": {"code": "invalid", "message": "Ask for at least one GPU, not 0.", "field": "request.gpus"}}'
    error = error_from(400, body, "application/json")
    assert (error.status, error.code, error.message, error.field) == (
        400,
        "invalid",
        "Ask for at least one GPU, not 0.",
        "request.gpus",
    )
    assert error_line(error) == "e31: Ask for at least one GPU, not 0."


def test_it_says_every_value_the_portal_refused_on_a_line_of_its_own():
    refusals = [
        {"field": "request.gpus", "message": "Ask for at least one GPU, not 0."},
        {"field": "request.hours", "message": "Hours can have at most two decimals,\n not 1.234."},
    ]
    first = refusals[0]
    body = json.dumps({"error": {"code": "invalid", **first, "errors": refusals}}).encode()
    error = error_from(400, body, "application/json")
    assert (error.field, error.message) == ("request.gpus", "Ask for at least one GPU, not 0.")
    assert error.errors == [
        ("request.gpus", "Ask for at least one GPU, not 0."),
        ("request.hours", "Hours can have at most two decimals, not 1.234."),
    ]
    assert error_lines(error) == [
        "e31: Ask for at least one GPU, not 0.",
        "e31: Hours can have at most two decimals, not 1.234.",
    ]
    older = error_from(400, json.dumps({"error": {"code": "invalid", **first}}).encode())
    assert older.errors == [("request.gpus", "Ask for at least one GPU, not 0.")], "a portal from before the list"
    assert error_lines(older) == ["e31: Ask for at least one GPU, not 0."]


def test_it_takes_plain_text_as_the_sentence():
    error = error_from(410, b"The upload expired and its data was deleted; start it again.\n", "text/plain")
    assert (error.code, error.field) == ("gone", None)
    assert error.message == "The upload expired and its data was deleted; start it again."


def test_it_does_not_print_a_page_of_html():
    error = error_from(502, b"<html><body><h1>Bad Gateway</h1>\n<p>nginx</p></body></html>", "text/html", "Bad Gateway")
    assert error_line(error) == "e31: The portal answered 502 Bad Gateway."


def test_it_puts_a_sentence_of_several_lines_on_one():
    error = APIError(409, "conflict", "Job 4 has ended:\n   it cannot be cancelled.")
    assert error_line(error) == "e31: Job 4 has ended: it cannot be cancelled."
    assert error_from(409, b'{"error": {"message": "  A\\n\\n B  "}}').message == "A B"
    assert error_line(ValueError("x" * 1000)) == "e31: " + "x" * 299 + "…"


def test_it_names_the_portal_it_cannot_reach():
    request = httpx.Request("GET", "http://127.0.0.1:9/api/v1/jobs/?page=2")
    line = error_line(httpx.ConnectError("[Errno 111] Connection refused", request=request))
    assert line == "e31: Cannot reach http://127.0.0.1:9/api/v1/jobs/: [Errno 111] Connection refused"
