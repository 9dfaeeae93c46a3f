"""Every error of the API as `{"error": {"code", "message", "field"?, "errors"?}}` (docs/api.md): the status and
code from Django REST framework's exception, the sentence the pages say, `field` naming the value refused; a 400
lists in `errors` every value refused with its sentence, the first of them being `field` and `message`."""

from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.views import exception_handler as drf_exception_handler

from jobs import services

CODES = {
    status.HTTP_400_BAD_REQUEST: "invalid",
    status.HTTP_401_UNAUTHORIZED: "unauthenticated",
    status.HTTP_403_FORBIDDEN: "forbidden",
    status.HTTP_404_NOT_FOUND: "not_found",
    status.HTTP_405_METHOD_NOT_ALLOWED: "method_not_allowed",
    status.HTTP_406_NOT_ACCEPTABLE: "not_acceptable",
    status.HTTP_409_CONFLICT: "conflict",
    status.HTTP_410_GONE: "gone",
    status.HTTP_415_UNSUPPORTED_MEDIA_TYPE: "unsupported_media_type",
    status.HTTP_429_TOO_MANY_REQUESTS: "throttled",
}


NOT_FOUND = "There is no such object in your organisation."


class Conflict(exceptions.APIException):
    """The job is not in a state that allows it; the message is the page's sentence."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class Gone(exceptions.APIException):
    """What was asked for existed and was deleted by its retention."""

    status_code = status.HTTP_410_GONE
    default_code = "gone"


def invalid(field: str, message: str) -> exceptions.ValidationError:
    """A value refused, named as docs/api.md names it (`request.gpus`, `page`)."""
    return exceptions.ValidationError({field: [message]})


def body(code: str, message: str, field: str | None = None) -> dict:
    error = {"code": code, "message": message}
    if field:
        error["field"] = field
    return {"error": error}


def exception_handler(exc, context):
    """DRF's handler (its status, and headers such as Retry-After and WWW-Authenticate) with our body."""
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    refused = _every(response.data) or [(None, str(response.data))]
    field, message = refused[0]
    if isinstance(exc, Http404):  # Django's sentences name models and queries: not for a partner
        message = str(exc) if isinstance(exc, services.Missing) else NOT_FOUND
    if isinstance(exc, exceptions.Throttled):
        wait = response.get("Retry-After", "1")
        message = f"Too many requests: try again in {wait} second{'s' * (wait != '1')}."
        if limit := getattr(context.get("request"), "e31_limit", ""):
            message = f"Too many {limit}: try again in {wait} second{'s' * (wait != '1')}."
    response.data = body(CODES.get(response.status_code, "error"), message, field)
    if response.status_code == status.HTTP_400_BAD_REQUEST:
        response.data["error"]["errors"] = [_refusal(field, message) for field, message in refused]
    return response


def _refusal(field: str | None, message: str) -> dict:
    return {"field": field, "message": message} if field else {"message": message}


def _every(detail, path: str = "") -> list[tuple[str | None, str]]:
    """Each refused value's dotted name and its message, in order, from DRF's nested error details."""
    if isinstance(detail, dict):
        return [
            found
            for key, value in detail.items()
            for found in _every(value, path if key in ("detail", "non_field_errors") else _joined(path, key))
        ]
    if isinstance(detail, list):
        return [found for item in detail for found in _every(item, path)]
    return [(path or None, str(detail))]


def _joined(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def not_found(request, *args, **kwargs) -> JsonResponse:
    """No such route under /api/: JSON like every other answer of the API, not the portal's 404 page."""
    return JsonResponse(body("not_found", "There is no such route in the API (see /api/v1/)."), status=404)
