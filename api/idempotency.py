"""The Idempotency-Key header on the API's creates (jobs, passes, uploads, webhooks), as Stripe's and OpenAI's
APIs take it: a client that lost the answer sends the request again with the same key and gets the first
answer, status and body, with `Idempotent-Replayed: true`, and nothing more is made. Keys are the
organisation's (an operator's own, outside one) and kept a day; portal.idempotency holds the rules."""

import json
import re
from functools import wraps

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from api.errors import Conflict, invalid
from portal import idempotency
from portal.idempotency import Found
from portal.models import organisation_for

HEADER = "Idempotency-Key"
_KEY = re.compile(r"[\x21-\x7e]{1,255}")
# What the request asks for besides its body (a tus create has none: its headers are the request).
_ASKING_HEADERS = ("Content-Type", "Upload-Length", "Upload-Defer-Length", "Upload-Metadata")
# What an answer says besides its body, to say again.
_ANSWER_HEADERS = ("Location", "Tus-Resumable", "Upload-Offset", "Upload-Expires")

KEY_PARAMETER = OpenApiParameter(
    HEADER,
    str,
    location=OpenApiParameter.HEADER,
    description="Any unique string (a UUID): the same key again answers as the first request did and makes nothing",
)


def idempotent(view):
    """A creating API view that takes an Idempotency-Key: below @api_view, on an authenticated request."""

    @wraps(view)
    def keyed(request, *args, **kwargs):
        key = request.headers.get(HEADER)
        if request.method != "POST" or key is None:
            return view(request, *args, **kwargs)
        if not _KEY.fullmatch(key):
            raise invalid(HEADER, f"{HEADER} is 1 to 255 visible ASCII characters, such as a UUID.")
        claim = idempotency.claim(_owner(request.user), key, _fingerprint(request))
        if claim.found is Found.ANSWERED:
            return _replayed(claim.answer)
        if claim.found is Found.DIFFERENT:
            raise Conflict(f"This {HEADER} was sent with a different request: use a new key for a new request.")
        if claim.found is Found.IN_FLIGHT:
            raise Conflict(
                f"The first request with this {HEADER} has not been answered: try again in a minute. If it broke, "
                "see what it made before you send the request with a new key."
            )
        return _answered(claim, view, request, *args, **kwargs)

    return keyed


def _answered(claim, view, request, *args, **kwargs):
    """The view's answer, kept for the key when it made something; a refusal frees the key. Anything else
    (a server error) leaves the key claimed and unanswered: what it made, if anything, cannot be known."""
    try:
        response = view(request, *args, **kwargs)
    except APIException:
        idempotency.release(claim)
        raise
    if response.status_code == 201:
        idempotency.answer(claim, _kept(response))
    else:
        idempotency.release(claim)
    return response


def _owner(user) -> str:
    organisation = organisation_for(user)
    return f"organisation:{organisation.pk}" if organisation else f"user:{user.pk}"


def _fingerprint(request) -> str:
    """The route, what the request's headers ask for, and its body (JSON read as data: the same object with
    its keys in another order or other spacing is the same request)."""
    raw = request._request.body
    try:
        body = json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"))
    except ValueError:
        body = raw
    asking = [f"{name}:{request.headers.get(name, '')}" for name in _ASKING_HEADERS]
    return idempotency.fingerprint(request.method, request.get_full_path(), *asking, body)


def _kept(response) -> dict:
    headers = {name: response[name] for name in _ANSWER_HEADERS if response.has_header(name)}
    if isinstance(response, Response):
        return {"status": response.status_code, "headers": headers, "data": _plain(response.data)}
    return {"status": response.status_code, "headers": headers, "content": response.content.decode()}


def _plain(data):
    """The data as JSON will show it (dates as text), to keep."""
    return json.loads(json.dumps(data, cls=JSONEncoder))


def _replayed(kept: dict) -> HttpResponse:
    headers = {**kept["headers"], "Idempotent-Replayed": "true"}
    if "data" in kept:
        return Response(kept["data"], status=kept["status"], headers=headers)
    return HttpResponse(kept["content"], status=kept["status"], headers=headers)
