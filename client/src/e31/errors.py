"""The portal's refusals as one exception, and the one line a failure prints."""

import json

import httpx

# The codes of docs/api.md by status, for an answer that comes without the portal's JSON body (a proxy's
# page, the upload endpoint's plain text).
CODES = {
    400: "invalid",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    410: "gone",
    429: "throttled",
}
LONGEST_LINE = 300


class APIError(Exception):
    """An answer of 400 or more: its status, the portal's code, its sentence and the field it names. `errors` is
    every value a 400 refused, as (field, sentence), the first being `field` and `message`."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        errors: list[tuple[str | None, str]] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.errors = errors or [(field, message)]

    def __repr__(self) -> str:
        return f"APIError({self.status}, {self.code!r}, {self.message!r}, field={self.field!r})"


def one_line(text: str) -> str:
    """Text on one line, not too long to read: its lines joined, whitespace collapsed."""
    line = " ".join(text.split())
    return line if len(line) <= LONGEST_LINE else line[: LONGEST_LINE - 1] + "…"


def error_from(status: int, body: bytes, content_type: str = "", reason: str = "") -> APIError:
    """The APIError an answer carries: the portal's `{"error": {...}}`, or plain text as the sentence."""
    fallback = f"The portal answered {status} {reason}".strip() + "."
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        found = payload["error"]
        return APIError(
            status,
            str(found.get("code") or CODES.get(status, "error")),
            one_line(str(found.get("message") or "")) or fallback,
            found.get("field") or None,
            _refusals(found.get("errors")),
        )
    text = body.decode("utf-8", "replace") if content_type.startswith("text/plain") else ""
    return APIError(status, CODES.get(status, "error"), one_line(text) or fallback)


def _refusals(given: object) -> list[tuple[str | None, str]] | None:
    """A 400's list of refused values, as (field, sentence); None when the answer has none (an older portal)."""
    if not isinstance(given, list):
        return None
    found = [
        (str(item["field"]) if item.get("field") else None, one_line(str(item.get("message") or "")))
        for item in given
        if isinstance(item, dict)
    ]
    return [(field, message) for field, message in found if message] or None


def error_of(response: httpx.Response) -> APIError:
    """The APIError of a response whose body has been read."""
    return error_from(
        response.status_code, response.content, response.headers.get("Content-Type", ""), response.reason_phrase
    )


def error_lines(error: BaseException) -> list[str]:
    """What the command line prints for a failure: a line for each value the portal refused, else one."""
    if isinstance(error, APIError) and len(error.errors) > 1:
        return [f"e31: {one_line(message)}" for _, message in error.errors]
    return [error_line(error)]


def error_line(error: BaseException) -> str:
    """What the command line prints for a failure: `e31: ` and one sentence."""
    if isinstance(error, APIError):
        message = error.message
    elif isinstance(error, httpx.TransportError):
        where = error.request.url.copy_with(query=None) if _has_request(error) else "the portal"
        message = f"Cannot reach {where}: {error or type(error).__name__}"
    else:
        message = str(error) or type(error).__name__
    return f"e31: {one_line(message)}"


def _has_request(error: httpx.TransportError) -> bool:
    try:
        error.request  # noqa: B018 (httpx raises RuntimeError when the error has no request)
    except RuntimeError:
        return False
    return True
