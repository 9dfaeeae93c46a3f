"""Never a 500 for input (issue 32): every route of the URLconf, the admin's included, is walked with hostile
values as an anonymous visitor, a partner (signed in, or by a token under /api/) and an operator. A route's
converters are filled with the persona's own objects and with hostile text where the converter takes text; then
the route is asked with hostile query strings and headers, sent broken bodies, its page's forms posted with
hostile fields and, on the API, its schema's JSON bodies with hostile leaves. Any 5xx fails the route's test,
which lists every (method, path, persona, value) that gave one."""

import json
import re
import uuid
from dataclasses import dataclass, field
from functools import cache
from html.parser import HTMLParser
from urllib.parse import parse_qsl, quote, urlencode, urljoin, urlsplit

import pytest
from django.apps import apps
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator

from api.webhooks.models import Endpoint
from jobs.models import Job
from jobs.uploads import resumable
from tests.api.support import finished, token_for
from tests.factories import finished_sample

DEEP = 5_000  # brackets: past the depth Python's JSON decoder recurses to

# Each class of hostile value once, as text: in a query string, a form field, a header, and a path where the
# route's converter takes it. Bytes are sent as they are: invalid UTF-8.
HOSTILE = {
    "huge": str(10**30),
    "overflow": "1e309",
    "negative": "-1",
    "zero": "0",
    "arabic-indic digit": "٣",
    "fullwidth digit": "３",
    "broken url": "http://[::1/h",
    "open bracket": "http://[",
    "no host": "//",
    "long": "x" * 100_000,
    "nul": "a\x00b",
    "invalid utf-8": b"\xff\xfe",
    "empty": "",
}
# The same classes as JSON values, and the wrong shapes a field may be sent in.
HOSTILE_JSON = {
    "huge": str(10**30).encode(),
    "overflow": b"1e309",
    "negative": b"-1",
    "zero": b"0",
    "arabic-indic digit": '"٣"'.encode(),
    "fullwidth digit": '"３"'.encode(),
    "broken url": b'"http://[::1/h"',
    "open bracket": b'"http://["',
    "no host": b'"//"',
    "long": b'"' + b"x" * 100_000 + b'"',
    "nul": b'"a\\u0000b"',
    "invalid utf-8": b'"\xff\xfe"',
    "deep": b"[" * DEEP + b"]" * DEEP,
    "object": b"{}",
    "null": b"null",
}
# Whole bodies: (what, content type, body).
BODIES = [
    ("empty body", "application/x-www-form-urlencoded", b""),
    ("invalid utf-8 form", "application/x-www-form-urlencoded", b"\xff=\xfe&a=%ff%00"),
    ("invalid utf-8 json", "application/json", b'{"a": "\xff\xfe"}'),
    ("deep json", "application/json", b"[" * DEEP + b"]" * DEEP),
    ("json overflow", "application/json", b"1e309"),
    ("broken json", "application/json", b'{"a": '),
    ("multipart without boundary", "multipart/form-data", b"--x\r\n"),
    ("broken multipart", "multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data\r\n\r\n\xff"),
    ("wrong content type", "application/xml", b"<a>\x00</a>"),
]
# The values a database may refuse a lookup with: PostgreSQL takes no NUL in text, SQLite no integer past 64 bits.
LOOKUP_BREAKERS = ["nul", "huge", "invalid utf-8", "long"]
# What a route may read from the query string, besides the names its page links to and the API's schema lists.
QUERY_NAMES = ["page", "page_size", "state", "month", "q", "gpus", "job", "again", "shown", "kind", "work", "next"]
# Admin's own: search, ordering, page, error flag, the list's filters kept while editing, a popup's field.
ADMIN_QUERY_NAMES = ["o", "p", "e", "all", "_changelist_filters", "_popup", "_to_field"]
HEADERS = [
    "Upload-Length",
    "Upload-Offset",
    "Upload-Metadata",
    "Upload-Checksum",
    "Range",
    "If-Range",
    "Idempotency-Key",
    "HX-Request",
    "HX-Target",
]
# A resumable upload's requests are read only with the protocol's version: sent with every hostile header.
TUS = {"Tus-Resumable": resumable.VERSION}
# Methods beside GET and POST: the API's and the resumable uploads' (a body goes with PATCH).
OTHER_METHODS = ["patch", "put", "delete", "head", "options"]
REDIRECTS_AWAY = {301, 302, 401, 403}
FORM = "application/x-www-form-urlencoded"


def _routes(patterns, prefix: str = "") -> list[str]:
    """Every route of the URLconf as one pattern string, each include's prefix before it."""
    found = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found += _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            found.append(prefix + str(pattern.pattern))
    return found


ROUTES = list(dict.fromkeys(_routes(get_resolver().url_patterns)))
# A converter <name> or <kind:name>, or a regular expression's named group.
PARAMETER = re.compile(r"<(?:(?P<kind>\w+):)?(?P<name>\w+)>|\(\?P<(?P<group>\w+)>(?P<regex>[^)]*)\)")


@cache
def api_schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def _schema_path(route: str) -> str:
    return "/" + PARAMETER.sub(lambda m: "{%s}" % ("id" if m["name"] == "pk" else m["name"]), route)


def _schema_operations(route: str) -> dict:
    return api_schema()["paths"].get(_schema_path(route), {})


def _template(node: dict, leaves: list, path: str = ""):
    """The shape of a JSON body from its schema: objects and lists as they are, each scalar a leaf's name."""
    components = api_schema()["components"]["schemas"]
    if "$ref" in node:
        return _template(components[node["$ref"].rsplit("/", 1)[1]], leaves, path)
    for combined in ("allOf", "oneOf", "anyOf"):
        if combined in node:
            return _template(node[combined][0], leaves, path)
    if "properties" in node:
        return {key: _template(value, leaves, f"{path}.{key}") for key, value in node["properties"].items()}
    if node.get("type") == "array":
        return [_template(node.get("items", {}), leaves, f"{path}[]")]
    leaves.append(path)
    return path


def _json(shape, values: dict[str, bytes]) -> bytes:
    """`shape` as JSON text, each leaf given its value's raw text (which json.dumps cannot write: 1e309,
    invalid UTF-8, a nesting too deep)."""
    if isinstance(shape, dict):
        return (
            b"{"
            + b",".join(json.dumps(key).encode() + b":" + _json(value, values) for key, value in shape.items())
            + b"}"
        )
    if isinstance(shape, list):
        return b"[" + b",".join(_json(value, values) for value in shape) + b"]"
    return values[shape]


class Page(HTMLParser):
    """What a page offers to send: its POST forms' actions and field names, and the query names of its links
    and GET forms."""

    def __init__(self, html: str = ""):
        super().__init__()
        self.forms: dict[str, list[str]] = {}
        self.query_names: set[str] = set()
        self._fields: list[str] | None = None  # the fields of the form being read, a POST form's or a GET form's
        self._get_form = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self._get_form = (attrs.get("method") or "get").lower() != "post"
            self._fields = [] if self._get_form else self.forms.setdefault(attrs.get("action") or "", [])
            self.query_names.update(name for name, _ in parse_qsl(urlsplit(attrs.get("action") or "").query))
        elif tag in ("input", "select", "textarea", "button") and attrs.get("name") and self._fields is not None:
            self._fields.append(attrs["name"])
        elif tag == "a" and "?" in (attrs.get("href") or ""):
            self.query_names.update(name for name, _ in parse_qsl(urlsplit(attrs["href"]).query))

    def handle_endtag(self, tag):
        if tag == "form" and self._get_form:
            self.query_names.update(self._fields or [])
        if tag == "form":
            self._fields, self._get_form = None, False


def _latin(names: list[str], values: dict, turn: int) -> tuple[dict, str]:
    """Turn `turn` of a walk in which each name takes each value once: name i takes value i + turn."""
    labels = list(values)
    chosen = {name: labels[(index + turn) % len(labels)] for index, name in enumerate(names)}
    return {name: values[label] for name, label in chosen.items()}, " ".join(f"{n}={v}" for n, v in chosen.items())


def _text(value) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


@dataclass
class World:
    """The personas' clients, and the ids of the partner's own objects that a route's converters name."""

    clients: dict[str, Client]
    own: dict[str, str]


@dataclass
class Walk:
    """One route's walk: the requests sent, and those answered with a 5xx."""

    route: str
    world: World
    failures: list[str] = field(default_factory=list)
    sent: int = 0

    def send(self, persona: str, method: str, path: str, value: str, **extra):
        response = getattr(self.world.clients[persona], method)(path, **extra)
        self.sent += 1
        if response.status_code >= 500:
            shown_path = path if len(path) <= 100 else f"{path[:100]}…"
            self.failures.append(f"{method.upper()} {shown_path} as {persona} with {value}: {response.status_code}")
        return response


@pytest.fixture
def world(settings, organisation, partner, operator, online_slots, rate_card) -> World:
    """A partner with a finished job, a sample, a webhook endpoint and an upload begun; an operator; no limits
    on how often they ask (a 429 would hide what a request meant to find)."""
    settings.E31_API_RATE = settings.E31_API_SUBMIT_RATE = settings.E31_API_ADDRESS_RATE = "100000/min"
    settings.E31_INTAKE_POSTS_PER_HOUR = settings.E31_PASSWORD_RESETS_PER_HOUR = 100_000
    settings.AXES_FAILURE_LIMIT = 100_000
    job = finished(organisation, created_by=partner)
    finished_sample(organisation, created_by=partner)
    endpoint = Endpoint.objects.create(organisation=organisation, url="https://hooks.example.com/e31", secret="s")
    upload = resumable.create(organisation, partner, "100", "")
    clients = {persona: Client(raise_request_exception=False) for persona in ("anonymous", "partner", "operator")}
    clients["partner"].force_login(partner)
    clients["operator"].force_login(operator)
    token = token_for(partner)
    clients["partner's token"] = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {token}")
    own = {"pk": str(job.pk), "job_id": str(job.pk), "upload_id": str(upload.pk), "name": "output.parquet"}
    return World(clients, {**own, "webhook": str(endpoint.pk)})


def _own(route: str, name: str, world: World) -> str:
    """The partner's own object for a converter; for the admin's object_id, the model's first object."""
    if name == "content_type_id":
        return str(ContentType.objects.get_for_model(Job).pk)
    if name == "object_id" and route.startswith("admin/r/"):
        return world.own["pk"]
    if name == "object_id":
        app_label, model_name = re.search(r"admin/(\w+)/(\w+)/<", route).groups()
        first = apps.get_model(app_label, model_name).objects.order_by("pk").first()
        return quote(str(first.pk) if first else "1", safe="")
    if name == "pk" and route.startswith("api/v1/webhooks/"):
        return world.own["webhook"]
    if name == "app_label":
        return "jobs"
    return world.own.get(name, "x")


def _fill(route: str, world: World, hostile: tuple[str, str] | None = None) -> str:
    """The route as a path: each parameter the partner's own, but the one `hostile` names, which takes its value."""

    def value(match: re.Match) -> str:
        name = match["name"] or match["group"]
        return hostile[1] if hostile and hostile[0] == name else _own(route, name, world)

    return "/" + PARAMETER.sub(value, route.replace("^", "").replace("$", "")).replace(".*", "")


def _path_values(kind: str | None) -> dict[str, str]:
    """The hostile values a converter takes, as they go in a path: an int's digits (too many for any id), a
    uuid no object has, and any text for str, path and a regular expression."""
    if kind == "int":
        return {"huge": str(10**30), "zero": "0", "too many digits": "9" * 5_000}
    if kind == "uuid":
        return {"unknown uuid": str(uuid.uuid4())}
    return {label: quote(value, safe="") for label, value in HOSTILE.items() if value}


@pytest.mark.parametrize("route", ROUTES)
def test_no_route_answers_a_5xx_for_hostile_input(route, world):
    walk = Walk(route, world)
    partner = "partner's token" if route.startswith("api/") else "partner"
    owner = "operator" if route.startswith("admin/") else partner
    walked = False
    for persona in dict.fromkeys([owner, "anonymous", partner, "operator"]):
        walked = _walk_as(walk, persona, walk_all=not walked) or walked
    assert not walk.failures, "\n".join([f"{len(walk.failures)} of {walk.sent} requests gave a 5xx:", *walk.failures])


def _walk_as(walk: Walk, persona: str, walk_all: bool) -> bool:
    """A plain GET and POST; when `walk_all`, the broken bodies where the persona is not sent away to log in,
    and the rest where it reaches the view. Whether it did."""
    path = _fill(walk.route, walk.world)
    first = walk.send(persona, "get", path, "nothing")
    posted = walk.send(persona, "post", path, "nothing")
    if not walk_all or (first.status_code in REDIRECTS_AWAY and posted.status_code in REDIRECTS_AWAY | {405}):
        return False
    for what, content_type, body in BODIES:
        walk.send(persona, "post", path, what, data=body, content_type=content_type)
    if first.status_code in REDIRECTS_AWAY:
        return False
    html = first.content.decode(errors="replace") if "html" in first.get("Content-Type", "") else ""
    page = Page(html)
    _walk_path(walk, persona)
    _walk_query_and_headers(walk, persona, path, page)
    _walk_each_name(walk, persona, path, page)
    _walk_forms(walk, persona, path, page)
    if walk.route.startswith("api/") or "uploads/" in walk.route:
        _walk_other_methods(walk, persona, path)
        _walk_json(walk, persona, path)
    return True


def _walk_path(walk: Walk, persona: str) -> None:
    for match in PARAMETER.finditer(walk.route):
        name = match["name"] or match["group"]
        for label, value in _path_values(match["kind"] if match["name"] else None).items():
            walk.send(persona, "get", _fill(walk.route, walk.world, (name, value)), f"{label} as <{name}>")


def _query_names(route: str, page: Page) -> list[str]:
    """The API's: those its schema lists (it refuses any other). Elsewhere, those the page links to and the
    usual ones."""
    if route.startswith("api/"):
        parameters = _schema_operations(route).get("get", {}).get("parameters", [])
        return [parameter["name"] for parameter in parameters if parameter["in"] == "query"]
    admin = ADMIN_QUERY_NAMES if route.startswith("admin/") else []
    return sorted(set(QUERY_NAMES + admin) | page.query_names)


def _hostile_headers(turn: int) -> tuple[dict[str, str], str]:
    headers, labels = _latin(HEADERS, HOSTILE, turn)
    return {**{name: _text(value) for name, value in headers.items()}, **TUS}, labels


def _walk_query_and_headers(walk: Walk, persona: str, path: str, page: Page) -> None:
    names = _query_names(walk.route, page)
    for turn in range(len(HOSTILE)):
        query, labels = _latin(names, HOSTILE, turn)
        headers, header_labels = _hostile_headers(turn)
        target = f"{path}?{urlencode(query)}" if query else path
        walk.send(persona, "get", target, f"query {labels}; headers {header_labels}", headers=headers)


def _walk_each_name(walk: Walk, persona: str, path: str, page: Page) -> None:
    """Each name the page links to or the schema lists, alone: a list refuses or sets aside a whole query for
    one bad value (the admin's), so the values that break a database's lookup are sent one name at a time."""
    names = set(page.query_names)
    if walk.route.startswith("api/"):
        names |= set(_query_names(walk.route, page))
    for name in sorted(names):
        for label in LOOKUP_BREAKERS:
            walk.send(persona, "get", f"{path}?{urlencode({name: HOSTILE[label]})}", f"query {name}={label}")


def _walk_forms(walk: Walk, persona: str, path: str, page: Page) -> None:
    """Each POST form of the page, each field taking each hostile value once, with the hostile headers."""
    for action, names in page.forms.items():
        target = urljoin(path, action)
        for turn in range(len(HOSTILE)):
            fields, labels = _latin(names, HOSTILE, turn)
            headers, header_labels = _hostile_headers(turn)
            body = urlencode(fields).encode()
            value = f"form {labels}; headers {header_labels}"
            walk.send(persona, "post", target, value, data=body, content_type=FORM, headers=headers)


def _walk_other_methods(walk: Walk, persona: str, path: str) -> None:
    """The API's and the uploads' other methods with hostile headers, each broken body with PATCH (a chunk of
    an upload), a few with the rest."""
    for method in OTHER_METHODS:
        for turn in range(len(BODIES) if method == "patch" else 3):
            headers, labels = _hostile_headers(turn)
            what, content_type, body = BODIES[turn]
            if method == "head":  # the test client sends a HEAD's data as its query
                walk.send(persona, method, path, f"headers {labels}", headers=headers)
            else:
                value = f"{what}; headers {labels}"
                walk.send(persona, method, path, value, data=body, content_type=content_type, headers=headers)


def _walk_json(walk: Walk, persona: str, path: str) -> None:
    """Each JSON body the schema describes for the route, each leaf taking each hostile value once."""
    for method, operation in _schema_operations(walk.route).items():
        content = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if not content:
            continue
        leaves: list[str] = []
        shape = _template(content["schema"], leaves)
        for turn in range(len(HOSTILE_JSON)):
            values, labels = _latin(leaves, HOSTILE_JSON, turn)
            walk.send(
                persona, method, path, f"JSON {labels}", data=_json(shape, values), content_type="application/json"
            )
