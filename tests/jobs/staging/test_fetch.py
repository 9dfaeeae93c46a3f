"""The staging fetcher against real servers on 127.0.0.1: refusals, redirects, limits, resumes, TLS.

Loopback servers are reached only through allowed_hosts; the refusal tests keep a server listening on the
very address they name, so without the guard those fetches would succeed (the "allowed" controls show it).
"""

import hashlib
import io
import os
import re
import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from jobs.staging import fetch as fetcher
from jobs.staging.fetch import FetchError, check_url, fetch, tls_context
from tests.jobs.staging.reading import LOCAL, get

BODY = os.urandom(300_000)
REAL_GETADDRINFO = socket.getaddrinfo


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.server.requests.append((self.path, self.headers))
        self.server.ports.append(self.client_address[1])
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404)
        else:
            route(self)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    """An HTTP server whose paths answer with the functions the test puts in `routes`."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.routes = {"/data": lambda handler: reply(handler, BODY)}
        self.requests = []
        self.ports = []  # the client's port of each request: one per connection

    def url(self, path: str = "/data", host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.server_port}{path}"


def reply(handler, body: bytes = b"", status: int = 200, length: int | None = None, **headers):
    """Answer with body; `length` overrides the Content-Length (a drop when it is larger)."""
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body) if length is None else length))
    for name, value in headers.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.end_headers()
    handler.wfile.write(body)


def redirect(location: str, status: int = 302):
    return lambda handler: reply(handler, status=status, Location=location)


@pytest.fixture
def server():
    httpd = Server()
    threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def resolver(monkeypatch, name: str, *answers: list[str]) -> list[str]:
    """Make `name` resolve to the next list of addresses on each lookup; return the lookups made."""
    lookups = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host != name:
            return REAL_GETADDRINFO(host, port, *args, **kwargs)
        lookups.append(host)
        addresses = answers[min(len(lookups), len(answers)) - 1]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in addresses]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


def test_it_streams_the_body_into_dest(server):
    seen = []
    result, data = get(server.url(), allowed_hosts=LOCAL, chunk_size=65536, progress=seen.append)
    assert data == BODY
    assert result == fetcher.Fetched(len(BODY), server.url(), "", 0)
    assert seen == sorted(seen)
    assert len(seen) > 1
    assert seen[-1] == len(BODY)


@pytest.mark.parametrize("kind", ["close-delimited", "chunked"])
def test_it_reads_a_body_without_content_length(server, kind):
    server.routes["/data"] = lambda handler: without_length(handler, BODY, chunked=kind == "chunked")
    _, data = get(server.url(), allowed_hosts=LOCAL)
    assert data == BODY


def without_length(handler, body: bytes, chunked: bool):
    handler.send_response(200)
    handler.send_header("Content-Type", "text/csv")
    if chunked:
        handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    for start in range(0, len(body), 50_000):
        piece = body[start : start + 50_000]
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
    handler.wfile.write(b"0\r\n\r\n" if chunked else b"")
    handler.close_connection = True


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.com/data.csv", "gopher://example.com/", "data:text/plain,hi",
     "javascript:alert(1)", "example.com/data.csv", "//example.com/data.csv"],
)  # fmt: skip
def test_it_refuses_schemes_other_than_http(url):
    with pytest.raises(FetchError, match="Only http:// and https://"):
        check_url(url)
    with pytest.raises(FetchError, match="Only http:// and https://"):
        fetch(url, io.BytesIO(), max_bytes=10)


@pytest.mark.parametrize(
    "url", ["https://user:secret@example.com/data.csv", "http://example.com@127.0.0.1/", "http://@example.com/"]
)
def test_it_refuses_credentials_in_the_url(url):
    with pytest.raises(FetchError, match="user name or password"):
        check_url(url)


@pytest.mark.parametrize("url", ["http:///data", "https://:443/data", "http://example.com:99999/", "http://a b/"])
def test_it_refuses_urls_without_a_usable_host(url):
    with pytest.raises(FetchError):
        check_url(url)


LOOPBACK_FORMS = ["127.0.0.1", "localhost", "2130706433", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "127.1",
                  "0", "0.0.0.0", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]"]  # fmt: skip


@pytest.mark.parametrize("host", LOOPBACK_FORMS)
def test_it_refuses_loopback_in_every_spelling(server, host):
    with pytest.raises(FetchError, match="not a public address"):
        get(server.url(host=host))
    assert server.requests == []
    # The control: allowed, the same URL reaches the server, so the refusal above is the guard's.
    assert get(server.url(host=host), allowed_hosts=(host.strip("[]"),))[1] == BODY


@pytest.mark.parametrize(
    "host",
    ["10.0.0.1", "172.16.0.1", "192.168.1.1", "169.254.169.254", "2852039166", "0xa9fea9fe", "0251.0376.0251.0376",
     "100.64.0.1", "0.1.2.3", "224.0.0.1", "255.255.255.255", "[::1]", "[::]", "[fc00::1]", "[fd12:3456::1]",
     "[fe80::1]", "[ff02::1]", "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]", "[64:ff9b::a9fe:a9fe]",
     "[2002:a9fe:a9fe::]", "[2002:7f00:1::]", "[::127.0.0.1]", "[::a9fe:a9fe]", "[::ffff:0:7f00:1]",
     "[64:ff9b:1::7f00:1]", "[64:ff9b:1::808:808]", "[fec0::1]",
     # IANA's special-purpose blocks that are not globally reachable, which Python's is_global may pass
     "192.0.0.8", "192.0.0.1", "192.0.0.171", "192.0.2.1", "198.51.100.7", "203.0.113.9", "192.88.99.1",
     "198.19.255.254", "240.0.0.1", "[2001:db8::1]", "[2001:2::1]", "[3fff::1]", "[5f00::1]", "[100::1]",
     "[::ffff:192.0.0.8]", "[64:ff9b::c000:8]", "[2002:c000:0008::]"],
)  # fmt: skip
def test_it_refuses_private_and_reserved_addresses(host):
    with pytest.raises(FetchError, match="not a public address"):
        check_url(f"http://{host}/latest/meta-data/")


@pytest.mark.parametrize(
    "url",
    ["http://8.8.8.8/data.csv", "https://[2606:4700:4700::1111]/", "http://[64:ff9b::808:808]/",
     "http://192.0.0.9/", "http://192.0.0.10/", "http://192.31.196.1/", "http://192.175.48.1/"],
)  # fmt: skip
def test_it_accepts_public_addresses(url):
    check_url(url)


def test_it_refuses_a_name_if_any_of_its_addresses_is_private(monkeypatch):
    resolver(monkeypatch, "mixed.example", ["8.8.8.8", "10.0.0.1"])
    with pytest.raises(FetchError, match=r"mixed\.example resolves to 10\.0\.0\.1"):
        check_url("https://mixed.example/data.csv")


def test_it_allows_only_the_hosts_named(server):
    check_url(server.url(host="LOCALHOST"), allowed_hosts=("localhost",))
    with pytest.raises(FetchError, match=r"127\.0\.0\.1 is not a public address"):
        check_url(server.url(), allowed_hosts=("localhost",))


def test_it_connects_to_the_address_it_checked(server, monkeypatch):
    # A later lookup would answer 127.0.0.2, where nothing listens: only the pinned address works.
    lookups = resolver(monkeypatch, "rebind.example", ["127.0.0.1"], ["127.0.0.2"])
    _, data = get(server.url(host="rebind.example"), allowed_hosts=("rebind.example",))
    assert data == BODY
    assert lookups == ["rebind.example"]
    assert server.requests[0][1]["Host"] == f"rebind.example:{server.server_port}"


def test_it_percent_encodes_what_the_url_leaves_raw(server):
    server.routes["/d%C3%A9j%C3%A0%20vu?q=%C3%A9&x=1%2F2"] = server.routes["/data"]
    _, data = get(server.url("/déjà%20vu?q=é&x=1%2F2"), allowed_hosts=LOCAL)
    assert data == BODY


def test_it_follows_redirects_and_reports_the_final_url(server):
    final = server.url(host="localhost")
    server.routes |= {"/a": redirect("/b", 301), "/b": redirect(final, 307)}
    result, data = get(server.url("/a"), allowed_hosts=("127.0.0.1", "localhost"))
    assert data == BODY
    assert result.final_url == final


@pytest.mark.parametrize(
    "location", ["http://localhost:{port}/data", "http://[::ffff:127.0.0.1]:{port}/data", "http://0x7f000001:{port}/data",
                 "http://169.254.169.254/latest/meta-data/", "file:///etc/passwd"],
)  # fmt: skip
def test_it_refuses_a_redirect_to_a_private_address(server, location):
    server.routes["/a"] = redirect(location.format(port=server.server_port))
    with pytest.raises(FetchError, match=r"not a public address|Only http"):
        get(server.url("/a"), allowed_hosts=LOCAL)
    assert [path for path, _ in server.requests] == ["/a"]


def test_it_stops_after_max_redirects(server):
    server.routes["/loop"] = redirect("/loop")
    with pytest.raises(FetchError, match="redirected more than 3 times"):
        get(server.url("/loop"), allowed_hosts=LOCAL, max_redirects=3)
    assert len(server.requests) == 4


def test_it_refuses_a_content_length_above_max_bytes(server):
    dest = io.BytesIO()
    with pytest.raises(FetchError, match="larger than the 299999 byte limit"):
        fetch(server.url(), dest, max_bytes=len(BODY) - 1, allowed_hosts=LOCAL)
    assert dest.getvalue() == b""


def test_it_accepts_a_body_of_exactly_max_bytes(server):
    assert get(server.url(), allowed_hosts=LOCAL, max_bytes=len(BODY))[0].bytes == len(BODY)


@pytest.mark.parametrize("chunked", [False, True])
def test_it_cuts_a_body_that_grows_past_max_bytes(server, chunked):
    server.routes["/data"] = lambda handler: without_length(handler, BODY, chunked=chunked)
    dest = io.BytesIO()
    with pytest.raises(FetchError, match="larger than the 100000 byte limit"):
        fetch(server.url(), dest, max_bytes=100_000, allowed_hosts=LOCAL, chunk_size=8192)
    assert len(dest.getvalue()) <= 100_000


def test_it_refuses_a_body_longer_than_its_content_length(raw_server):
    url = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + b"x" * 20)
    with pytest.raises(FetchError, match="more bytes than its Content-Length"):
        get(url, allowed_hosts=LOCAL)


def dropping(body: bytes, fail: int = 1, **resume_headers):
    """A route that drops the connection halfway `fail` times, honouring Range (with resume_headers on top)."""
    calls = []

    def route(handler):
        calls.append(handler.path)
        start = int(handler.headers.get("Range", "bytes=0-").removeprefix("bytes=").split("-")[0])
        rest = body[start:]
        headers = {"ETag": '"v1"'}
        if start:
            headers |= {"Content_Range": f"bytes {start}-{len(body) - 1}/{len(body)}"} | resume_headers
        sent = rest[: len(rest) // 2] if len(calls) <= fail else rest
        reply(handler, sent, 206 if start else 200, length=len(rest), **headers)

    return route


def test_it_resumes_a_dropped_connection_with_a_range_request(server):
    server.routes["/data"] = dropping(BODY)
    result, data = get(server.url(), allowed_hosts=LOCAL)
    assert hashlib.sha256(data).hexdigest() == hashlib.sha256(BODY).hexdigest()
    assert (result.bytes, result.resumes) == (len(BODY), 1)
    resumed = server.requests[1][1]
    assert (resumed["Range"], resumed["If-Range"]) == (f"bytes={len(BODY) // 2}-", '"v1"')


def test_it_refuses_to_restart_when_the_server_ignores_range(server):
    route = dropping(BODY)  # the first answer drops halfway; asked to resume, the whole body again
    server.routes["/data"] = lambda handler: reply(handler, BODY) if len(server.requests) > 1 else route(handler)
    with pytest.raises(FetchError, match="cannot resume"):
        get(server.url(), allowed_hosts=LOCAL)


@pytest.mark.parametrize(
    ("content_range", "reason"), [("bytes 0-299999/300000", "wrong place"), ("bytes 150000-299999/400000", "changed")]
)
def test_it_refuses_a_resume_of_something_else(server, content_range, reason):
    server.routes["/data"] = dropping(BODY, Content_Range=content_range)
    with pytest.raises(FetchError, match=reason):
        get(server.url(), allowed_hosts=LOCAL)


def test_it_gives_up_after_max_resumes(server):
    server.routes["/data"] = dropping(BODY, fail=10)
    with pytest.raises(FetchError, match="dropped 3 times"):
        get(server.url(), allowed_hosts=LOCAL, max_resumes=2)
    assert len(server.requests) == 3


PART = 32_768  # parts of BODY in the ranged tests: ten of them, each read in 8 KiB chunks
RANGED = {"part_bytes": PART, "chunk_size": 8192, "connections": 4}


class Version:
    """A file a ranged route serves: its bytes and its ETag (None: it sends none), changed by a test."""

    def __init__(self, body: bytes = BODY, etag: str | None = '"v1"'):
        self.body, self.etag = body, etag


def ranged(file: Version, drop=lambda start, calls: False, if_range: bool = True):
    """A route that answers one byte range (206) as a file server does, a changed file whole (200) when
    If-Range names another version (unless `if_range` is False: then it serves the range of the new one);
    `drop(start, calls)` says whether to hang up halfway through the answer for a range from `start`."""
    calls: list[int] = []

    def route(handler):
        asked = re.fullmatch(r"bytes=(\d+)-(\d*)", handler.headers.get("Range", ""))
        headers = {"Accept_Ranges": "bytes"} | ({"ETag": file.etag} if file.etag else {})
        stale = if_range and handler.headers.get("If-Range") not in (None, file.etag)
        if not asked or stale:
            return reply(handler, file.body, **headers)
        start, end = int(asked[1]), min(int(asked[2] or len(file.body) - 1), len(file.body) - 1)
        calls.append(start)
        sent = file.body[start : end + 1]
        headers["Content_Range"] = f"bytes {start}-{end}/{len(file.body)}"
        if drop(start, calls):
            handler.close_connection = True
            return reply(handler, sent[: len(sent) // 2], 206, length=len(sent), **headers)
        return reply(handler, sent, 206, **headers)

    return route


def asked(server) -> list[str]:
    return [headers.get("Range", "") for _, headers in server.requests]


def test_it_fetches_a_file_that_takes_ranges_in_parts_over_several_connections(server):
    server.routes["/data"] = ranged(Version())
    seen = []
    result, data = get(server.url(), allowed_hosts=LOCAL, progress=seen.append, **RANGED)
    assert data == BODY
    assert result == fetcher.Fetched(len(BODY), server.url(), "", 0)
    assert asked(server)[0] == f"bytes=0-{PART - 1}", "the first GET asks for the first part"
    parts = sorted(asked(server)[1:], key=lambda header: int(header.split("=")[1].split("-")[0]))
    assert parts == [f"bytes={start}-{start + PART - 1}" for start in range(PART, 9 * PART, PART)] + [
        f"bytes={9 * PART}-"
    ], "each part once, the last to the file's end"
    assert {headers["If-Range"] for _, headers in server.requests[1:]} == {'"v1"'}
    assert len(set(server.ports)) > 1, "more than one connection"
    assert len(set(server.ports)) <= 1 + RANGED["connections"], "a connection kept alive for its next part"
    assert seen == sorted(seen) and seen[-1] == len(BODY)


@pytest.mark.parametrize(
    "answer",
    [lambda handler: reply(handler, BODY), lambda handler: reply(handler, BODY, Accept_Ranges="bytes", ETag='"v1"')],
    ids=["no Accept-Ranges", "Accept-Ranges but a 200 to the range"],
)
def test_a_server_that_ignores_range_is_read_as_one_stream(server, answer):
    server.routes["/data"] = answer
    result, data = get(server.url(), allowed_hosts=LOCAL, **RANGED)
    assert data == BODY
    assert (result.bytes, result.resumes, len(server.requests)) == (len(BODY), 0, 1)


def test_an_empty_file_whose_range_cannot_be_satisfied_is_fetched_whole(server):
    def route(handler):
        if "Range" in handler.headers:
            return reply(handler, status=416, Content_Range="bytes */0")
        return reply(handler)

    server.routes["/data"] = route
    result, data = get(server.url(), allowed_hosts=LOCAL, **RANGED)
    assert (result.bytes, data, asked(server)) == (0, b"", [f"bytes=0-{PART - 1}", ""])


def test_a_range_connection_that_drops_asks_again_for_its_range_alone(server):
    server.routes["/data"] = ranged(Version(), drop=lambda start, calls: start == 3 * PART and calls.count(start) == 1)
    result, data = get(server.url(), allowed_hosts=LOCAL, **RANGED)
    assert data == BODY
    assert result.resumes == 1
    again = f"bytes={3 * PART + PART // 2}-{4 * PART - 1}"
    assert asked(server).count(again) == 1, "the rest of the dropped part, and nothing else again"
    assert len(asked(server)) == 11


def test_a_range_that_keeps_dropping_gives_up_naming_the_host(server):
    server.routes["/data"] = ranged(Version(), drop=lambda start, calls: start >= 3 * PART and start < 4 * PART)
    with pytest.raises(FetchError, match=r"The connection to 127\.0\.0\.1 dropped 3 times; giving up\."):
        get(server.url(), allowed_hosts=LOCAL, max_resumes=2, **RANGED)
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("e31-part")]


@pytest.mark.parametrize("if_range", [True, False], ids=["server honours If-Range", "server ignores If-Range"])
def test_a_file_that_changes_between_ranges_fails_saying_so(server, if_range):
    file = Version()
    route = ranged(file, if_range=if_range)

    def changing(handler):
        route(handler)
        file.body, file.etag = os.urandom(len(BODY)), '"v2"'  # replaced once its first part is sent

    server.routes["/data"] = changing
    dest = io.BytesIO()
    with pytest.raises(FetchError) as refused:
        fetch(server.url(), dest, max_bytes=len(BODY), allowed_hosts=LOCAL, timeout=5.0, **RANGED)
    assert str(refused.value) == (
        'The file at 127.0.0.1 changed while it was downloaded (its ETag was "v1" and is now "v2"); '
        "stage it again once it is complete."
    )
    assert BODY.startswith(dest.getvalue()), "no byte of the new version handed on"


def test_a_file_that_changes_size_between_ranges_fails_saying_so(server):
    file = Version(etag=None)
    route = ranged(file)

    def growing(handler):
        route(handler)
        file.body = BODY + b"more"

    server.routes["/data"] = growing
    with pytest.raises(FetchError, match=r"The file at 127\.0\.0\.1 changed size while it was downloaded\."):
        get(server.url(), allowed_hosts=LOCAL, **RANGED)


def test_a_file_without_a_validator_is_fetched_on_one_connection_after_its_first_part(server):
    """Parts of a file that cannot be named (no ETag, no Last-Modified) could come from two versions of it."""
    server.routes["/data"] = ranged(Version(etag=None))
    _, data = get(server.url(), allowed_hosts=LOCAL, **RANGED)
    assert data == BODY
    assert asked(server) == [f"bytes=0-{PART - 1}", f"bytes={PART}-"]


def test_it_refuses_a_ranged_file_larger_than_max_bytes_before_writing(server):
    server.routes["/data"] = ranged(Version())
    dest = io.BytesIO()
    with pytest.raises(FetchError, match="larger than the 299999 byte limit"):
        fetch(server.url(), dest, max_bytes=len(BODY) - 1, allowed_hosts=LOCAL, **RANGED)
    assert (dest.getvalue(), len(server.requests)) == (b"", 1)


@pytest.mark.parametrize(
    ("replies", "error"),
    [
        ((b"bytes 10-19/20", b"0123456789" + b"more"), "sent more bytes than its Content-Length announced"),
        ((b"bytes 10-19/21", b"0123456789"), "changed size while it was downloaded"),
        ((b"bytes 12-19/20", b"23456789"), "sent other bytes than the range asked for"),
    ],
    ids=["a longer last part", "another total", "other bytes"],
)
def test_it_refuses_a_range_answer_that_lies(raw_server, replies, error):
    content_range, body = replies
    first = b'HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/20\r\nETag: "a"\r\nContent-Length: 10\r\n\r\n'
    last = b'HTTP/1.1 206 Partial Content\r\nContent-Range: %s\r\nETag: "a"\r\nContent-Length: %d\r\n\r\n'
    url = raw_server(first + b"0123456789", last % (content_range, len(body) - body.endswith(b"more") * 4) + body)
    with pytest.raises(FetchError, match=error):
        get(url, allowed_hosts=LOCAL, part_bytes=10)


@pytest.mark.parametrize(
    "location",
    ["http://localhost:{port}/elsewhere", "http://[::ffff:127.0.0.1]:{port}/elsewhere",
     "http://0x7f000001:{port}/elsewhere", "http://169.254.169.254/latest/meta-data/", "file:///etc/passwd"],
)  # fmt: skip
def test_it_refuses_a_range_redirected_to_a_private_address(server, location):
    first = ranged(Version())

    def route(handler):
        if handler.headers["Range"].startswith("bytes=0-"):
            return first(handler)
        return reply(handler, status=302, Location=location.format(port=server.server_port), Connection="close")

    server.routes["/data"] = route
    with pytest.raises(FetchError, match=r"not a public address|Only http"):
        get(server.url(), allowed_hosts=LOCAL, **RANGED)
    assert all(path == "/data" for path, _ in server.requests), "nothing reached the redirect's address"


def test_a_range_redirected_to_an_allowed_host_is_followed_hop_by_hop(server):
    server.routes["/data"] = ranged(Version())
    server.routes["/part"] = lambda handler: reply(
        handler, status=307, Location=server.url(host="localhost"), Connection="close"
    )
    first = server.routes["/data"]
    server.routes["/moved"] = lambda handler: (
        first(handler)
        if handler.headers["Range"].startswith("bytes=0-")
        else reply(handler, status=302, Location="/part", Connection="close")
    )
    _, data = get(server.url("/moved"), allowed_hosts=("127.0.0.1", "localhost"), **RANGED)
    assert data == BODY
    assert {headers["Host"] for path, headers in server.requests if path == "/data"} == {
        f"localhost:{server.server_port}"
    }


def test_every_range_connection_goes_to_the_address_checked_first(server, monkeypatch):
    # A later lookup would answer 127.0.0.2, where nothing listens: only the pinned address works.
    lookups = resolver(monkeypatch, "rebind.example", ["127.0.0.1"], ["127.0.0.2"])
    server.routes["/data"] = ranged(Version())
    _, data = get(server.url(host="rebind.example"), allowed_hosts=("rebind.example",), **RANGED)
    assert data == BODY
    assert lookups == ["rebind.example"]
    assert len(set(server.ports)) > 1


def test_a_reader_that_stops_stops_every_connection(server):
    server.routes["/data"] = ranged(Version())

    class Stops(io.BytesIO):
        def write(self, data) -> int:
            if self.tell() >= 2 * PART:
                raise OSError("staging stopped reading the download")
            return super().write(data)

    with pytest.raises(OSError, match="staging stopped reading"):
        fetch(server.url(), Stops(), max_bytes=len(BODY), allowed_hosts=LOCAL, **RANGED)
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("e31-part")]


@pytest.mark.parametrize("status", [403, 404, 500])
def test_it_names_the_http_status(server, status):
    server.routes["/data"] = lambda handler: reply(handler, b"no", status)
    with pytest.raises(FetchError, match=f"127.0.0.1 answered HTTP {status}"):
        get(server.url(), allowed_hosts=LOCAL)


def test_it_reports_a_refused_connection():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    with pytest.raises(FetchError, match=rf"127\.0\.0\.1 \(port {port}\) refused the connection"):
        get(f"http://127.0.0.1:{port}/data", allowed_hosts=LOCAL)


def test_it_reports_a_server_that_does_not_answer():
    with socket.create_server(("127.0.0.1", 0)) as listener:  # never accepted: connects, never answers
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/data"
        with pytest.raises(FetchError, match=r"did not answer within 0\.2 s"):
            get(url, allowed_hosts=LOCAL, timeout=0.2)


def test_it_reports_a_host_that_does_not_exist():
    with pytest.raises(FetchError, match=r"nothing-here\.invalid cannot be found"):
        get("https://nothing-here.invalid/data.csv")


def test_it_verifies_certificates_and_host_names_by_default():
    context = tls_context()
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for localhost (only), made with the cryptography package."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "cert.pem", folder / "key.pem"


@pytest.fixture
def tls_server(server, certificate):
    """The server, speaking TLS with the localhost certificate; `names` records the SNI names it was sent."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    server.names = []
    context.sni_callback = lambda _socket, name, _context: server.names.append(name)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


def test_it_sends_the_host_name_for_tls_while_connecting_to_the_checked_address(tls_server, certificate, monkeypatch):
    monkeypatch.setattr(fetcher, "tls_context", lambda: ssl.create_default_context(cafile=certificate[0]))
    lookups = resolver(monkeypatch, "localhost", ["127.0.0.1"])
    _, data = get(tls_server.url(host="localhost", scheme="https"), allowed_hosts=("localhost",))
    assert data == BODY
    assert (tls_server.names, lookups) == (["localhost"], ["localhost"])


def test_it_refuses_a_certificate_for_another_name(tls_server, certificate, monkeypatch):
    monkeypatch.setattr(fetcher, "tls_context", lambda: ssl.create_default_context(cafile=certificate[0]))
    with pytest.raises(FetchError, match=r"certificate of 127\.0\.0\.1 could not be verified"):
        get(tls_server.url(scheme="https"), allowed_hosts=LOCAL)


def test_it_refuses_an_untrusted_certificate(tls_server):
    with pytest.raises(FetchError, match="certificate of localhost could not be verified"):
        get(tls_server.url(host="localhost", scheme="https"), allowed_hosts=("localhost",))


class Poster(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests.append((self.path, self.headers, body))
        route = self.server.routes.get(self.path)
        if route:
            route(self)
        else:
            reply(self, status=204)

    def log_message(self, *args):
        pass


@pytest.fixture
def post_server():
    httpd = Server()
    httpd.RequestHandlerClass = Poster
    threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_it_posts_through_the_same_guard_and_follows_no_redirect(post_server):
    with pytest.raises(FetchError, match=r"127\.0\.0\.1 is not a public address"):
        fetcher.post(post_server.url("/hook"), b"{}", {})
    assert post_server.requests == [], "refused before anything was sent"
    posted = fetcher.post(post_server.url("/hook"), b'{"a": 1}', {"X-Test": "yes"}, allowed_hosts=LOCAL)
    _, headers, body = post_server.requests[0]
    assert (posted.status, body, headers["X-Test"]) == (204, b'{"a": 1}', "yes")
    post_server.routes["/moved"] = lambda handler: reply(handler, status=307, Location=post_server.url("/hook"))
    assert fetcher.post(post_server.url("/moved"), b"{}", {}, allowed_hosts=LOCAL).status == 307
    assert len(post_server.requests) == 2, "the 307 was not followed with the body"
