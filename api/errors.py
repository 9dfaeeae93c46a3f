"""Every error of the API as `{"error": {"code", "message", "field"?}}` (docs/api.md): the status and code
from Django REST framework's exception, the sentence the pages say, `field` naming the value refused."""

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
    field, message = _first(response.data)
    if isinstance(exc, Http404):  # Django's sentences name models and queries: not for a partner
        message = str(exc) if isinstance(exc, services.Missing) else NOT_FOUND
    if isinstance(exc, exceptions.Throttled):
        wait = response.get("Retry-After", "1")
        message = f"Too many requests: try again in {wait} second{'s' * (wait != '1')}."
        if limit := getattr(context.get("request"), "e31_limit", ""):
            message = f"Too many {limit}: try again in {wait} second{'s' * (wait != '1')}."
    response.data = body(CODES.get(response.status_code, "error"), message, field)
    return response


def _first(detail, path: str = "") -> tuple[str | None, str]:
    """The first refused value's dotted name and its message, from DRF's nested error details."""
    if isinstance(detail, dict):
        key, value = next(iter(detail.items()))
        if key in ("detail", "non_field_errors"):
            return _first(value, path)
        return _first(value, f"{path}.{key}" if path else str(key))
    if isinstance(detail, list) and detail:
        return _first(detail[0], path)
    return path or None, str(detail)


def not_found(request, *args, **kwargs) -> JsonResponse:
    """No such route under /api/: JSON like every other answer of the API, not the portal's 404 page."""
    return JsonResponse(body("not_found", "There is no such route in the API (see /api/v1/)."), status=404)
