"""Fetching a dataset by URL for staging: http(s) only, public addresses only, streamed, resumable; and
posting to a URL (a webhook) through the same guard.

Each hop (redirects included) is resolved once, every address the host resolves to is checked, and the TCP
connection is opened to a checked address by us, so DNS cannot answer differently between check and connect
(rebinding). The host name still goes in the Host header, and for https in SNI and the certificate check.
Hosts an operator lists in `allowed_hosts` skip the public-address check but are pinned all the same.

The first GET asks for the file's first part as a range. Where the server answers with that part (206),
the rest is fetched in parts over several connections at once (jobs.staging.reassembly hands them on in
order, from buffers lent to `dest` where it takes them): each connection pinned to the checked address,
each redirect checked hop by hop, each part asked for with `If-Range` and its answer checked to name the
same file, so a part of a changed file is never spliced in. Where the server sends the whole body (200),
it is read on the one connection.

The body goes to `dest` as it arrives, in order. A connection dropped mid-body is resumed with a range
from where it dropped (and `If-Range`); one stream whose server answers a resume with the whole body again
ends the fetch instead of restarting it, since `dest` need not be seekable and a restart could loop on a
flaky host.
"""

import contextlib
import http.client
import ipaddress
import re
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import quote, urljoin, urlsplit

from jobs.staging import reassembly
from portal.text import ascii_count

REDIRECTS = {301, 302, 303, 307, 308}
# NAT64 (RFC 6052) and 6to4 addresses carry an IPv4 address; they are judged by that address.
NAT64 = ipaddress.ip_network("64:ff9b::/96")
# IPv6 forms that Python's is_global passes and that never lead to a public host: IPv4-compatible
# (::a.b.c.d, deprecated, ::127.0.0.1 among them), SIIT-translated (::ffff:0:a.b.c.d), local-use NAT64
# (RFC 8215: it leads into the operator's own networks) and site-local (fec0::/10, deprecated).
NEVER_PUBLIC = tuple(ipaddress.ip_network(net) for net in ("::/96", "::ffff:0:0:0/96", "64:ff9b:1::/48", "fec0::/10"))
# IANA's special-purpose address registries (iana-ipv4-special-registry, iana-ipv6-special-registry): the
# blocks whose "Globally Reachable" is False, and within them the few that are globally reachable. Python's
# is_global lags the registry, and differs between releases (3.11.7 passes 192.0.0.8): both must say public.
NOT_GLOBALLY_REACHABLE = tuple(
    ipaddress.ip_network(net)
    for net in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
        "203.0.113.0/24", "240.0.0.0/4", "255.255.255.255/32",
        "::1/128", "::/128", "::ffff:0:0/96", "64:ff9b:1::/48", "100::/64", "100:0:0:1::/64", "2001::/23",
        "2001:db8::/32", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10",
    )
)  # fmt: skip
GLOBALLY_REACHABLE_WITHIN = tuple(
    ipaddress.ip_network(net)
    for net in (
        "192.0.0.9/32", "192.0.0.10/32", "2001:1::1/128", "2001:1::2/128", "2001:1::3/128", "2001:3::/32",
        "2001:4:112::/48", "2001:20::/28", "2001:30::/28",
    )
)  # fmt: skip
END_GRACE = 1.0  # seconds to wait for the close we asked for once Content-Length bytes are in
CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)", re.ASCII)  # \d alone also takes "١٢٣"
URL_SAFE = "/%:@!$&'()*+,;=-._~?"  # what a URL may already hold as is: only the rest is percent-encoded
HEADERS = {"Accept-Encoding": "identity", "Connection": "close", "User-Agent": "e31-portal-staging"}
CONNECTIONS = 4  # connections at once to one file whose server takes ranges
PART_BYTES = 8 * 1024 * 1024  # a part of such a file: the first GET asks for the first one


class FetchError(Exception):
    """A URL that cannot or must not be fetched; the message, for the user, names the host or address and why."""


@dataclass(frozen=True)
class Fetched:
    bytes: int
    final_url: str
    content_type: str
    resumes: int  # how many times a dropped connection was resumed with a Range request


@dataclass(frozen=True)
class _Target:
    scheme: str
    host: str
    port: int
    path: str
    addresses: tuple[str, ...]


def is_public(address: str) -> bool:
    """Whether an IP address is globally routable unicast, looking inside IPv6 forms that wrap IPv4."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and any(ip in network for network in NEVER_PUBLIC):
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in NAT64 else ip.ipv4_mapped or ip.sixtofour
        ip = embedded or ip
    special = any(ip in network for network in NOT_GLOBALLY_REACHABLE) and not any(
        ip in network for network in GLOBALLY_REACHABLE_WITHIN
    )
    return ip.is_global and not ip.is_multicast and not special


def check_url(url: str, allowed_hosts: Sequence[str] = ()) -> None:
    """Refuse (FetchError) a URL that is not http(s), carries credentials or reaches a non-public address.

    Credentials are refused: they would be stored with the job and shown back, and `user@host` is a
    classic way to disguise the real host. Partners give a pre-signed URL instead.
    """
    _target(url, allowed_hosts)


def _target(url: str, allowed_hosts: Sequence[str]) -> _Target:
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise FetchError("The URL contains spaces or control characters.")
    try:
        parts = urlsplit(url)
    except ValueError:  # a bracket that opens an IPv6 host and never closes, or closes with none open
        raise FetchError("The URL's host is not valid: an IPv6 address goes whole between [ and ].") from None
    if parts.scheme not in ("http", "https"):
        what = f"{parts.scheme}: URLs" if parts.scheme else "a URL without http:// or https://"
        raise FetchError(f"Only http:// and https:// URLs can be fetched, not {what}.")
    if "@" in parts.netloc:
        raise FetchError("URLs with a user name or password are not accepted; use a pre-signed URL instead.")
    host = parts.hostname
    if not host:
        raise FetchError("The URL has no host.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as error:
        raise FetchError(f"The URL's port for {host} is not valid.") from error
    addresses = _resolve(host, port)
    if host.rstrip(".") not in {h.lower().rstrip(".") for h in allowed_hosts}:
        for address in addresses:
            if not is_public(address):
                named = host if address == host else f"{host} resolves to {address}, which"
                raise FetchError(f"{named} is not a public address; only public hosts can be reached.")
    path = quote(parts.path or "/", safe=URL_SAFE) + (f"?{quote(parts.query, safe=URL_SAFE)}" if parts.query else "")
    return _Target(parts.scheme, host, port, path, addresses)


def _resolve(host: str, port: int) -> tuple[str, ...]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        raise FetchError(f"The host {host} cannot be found.") from error
    return tuple(dict.fromkeys(info[4][0] for info in infos))


def tls_context() -> ssl.SSLContext:
    """The system's trusted CAs, with the certificate and the host name both verified."""
    return ssl.create_default_context()


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked addresses, whatever the host name would resolve to by now."""

    def __init__(self, target: _Target, timeout: float):
        super().__init__(target.host, target.port, timeout=timeout)
        self.addresses = target.addresses

    def connect(self) -> None:
        error: OSError = ConnectionError(f"{self.host} has no address")
        for address in self.addresses:
            try:
                self.sock = socket.create_connection((address, self.port), timeout=self.timeout)
                break
            except OSError as exc:
                error = exc
        else:
            raise error
        self.pinned = self.sock  # http.client drops self.sock when it hands the socket to the response


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    default_port = 443

    def connect(self) -> None:
        super().connect()
        self.sock = self.pinned = tls_context().wrap_socket(self.sock, server_hostname=self.host)


class _Unreachable(FetchError):
    """A connection that failed or timed out, where one that is refused on principle (the guard, a
    certificate) is a plain FetchError: a range connection tries the first again."""


class _Dropped(Exception):
    """A connection that ended, or failed, before the bytes it was answering with were all in."""


def _connection(target: _Target, timeout: float) -> _PinnedHTTPConnection:
    kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    return kind(target, timeout)


def _send(
    connection: _PinnedHTTPConnection,
    target: _Target,
    headers: dict[str, str],
    timeout: float,
    method: str = "GET",
    body: bytes | None = None,
) -> http.client.HTTPResponse:
    """Send one request on `connection` (connected first if it is not); its failures become FetchErrors."""
    where = f"{target.host} (port {target.port})"
    try:
        connection.request(method, target.path, body=body, headers={**HEADERS, **headers})
        return connection.getresponse()
    except ssl.SSLCertVerificationError as error:
        connection.close()
        raise FetchError(f"The certificate of {target.host} could not be verified ({error.verify_message}).") from None
    except ConnectionRefusedError:
        message = f"{where} refused the connection."
    except TimeoutError:
        message = f"{where} did not answer within {timeout:g} s."
    except (OSError, http.client.HTTPException) as error:
        message = f"{where} could not be reached ({error or type(error).__name__})."
    connection.close()
    raise _Unreachable(message)


def _request(
    target: _Target, headers: dict[str, str], timeout: float, method: str = "GET", body: bytes | None = None
) -> tuple[http.client.HTTPResponse, socket.socket]:
    """Send one request on a connection of its own; return the response and its socket."""
    connection = _connection(target, timeout)
    response = _send(connection, target, headers, timeout, method, body)
    return response, connection.pinned


def _open(
    url: str, headers: dict[str, str], allowed_hosts: Sequence[str], timeout: float, max_redirects: int
) -> tuple[http.client.HTTPResponse, socket.socket, str, _Target]:
    """GET url, following redirects (each hop checked anew); return response, socket, its URL and where
    that was checked to be."""
    for _ in range(max_redirects + 1):
        target = _target(url, allowed_hosts)
        response, sock = _request(target, headers, timeout)
        if response.status not in REDIRECTS:
            return response, sock, url, target
        url = _redirected(url, response, target.host)
        sock.close()
    raise FetchError(f"The URL redirected more than {max_redirects} times (last to {target.host}).")


def _redirected(url: str, response: http.client.HTTPResponse, host: str) -> str:
    """Where a redirect answer points, from `url`; the answer is closed."""
    location = response.getheader("Location")
    response.close()
    if not location:
        raise FetchError(f"{host} answered HTTP {response.status} without saying where to.")
    return urljoin(url, location)


def _length(response: http.client.HTTPResponse, host: str) -> int | None:
    """The body's Content-Length, or None when it is chunked or ends at the close."""
    declared = response.getheader("Content-Length")
    if response.chunked or declared is None:
        return None
    length = ascii_count(declared.strip())
    if length is None:
        raise FetchError(f"{host} sent an invalid Content-Length ({declared!r}).")
    return length


def _resumed(response: http.client.HTTPResponse, host: str, written: int, total: int | None) -> tuple[int | None, int]:
    """Check that a resume answer continues the same file at `written`; return its size and this part's end.

    A 206's Content-Range, not its Content-Length, says which bytes it holds.
    """
    if response.status == 200:
        raise FetchError(f"The connection to {host} dropped and it cannot resume (it sent the whole file again).")
    if response.status != 206:
        raise FetchError(f"The connection to {host} dropped and resuming failed (HTTP {response.status}).")
    found = CONTENT_RANGE.fullmatch(response.getheader("Content-Range", "").strip())
    if not found or int(found[1]) != written or int(found[2]) < written:
        raise FetchError(f"The connection to {host} dropped and it resumed at the wrong place.")
    size = None if found[3] == "*" else int(found[3])
    if total is not None and size != total:
        raise FetchError(f"The file at {host} changed size while it was downloaded.")
    return size, int(found[2]) + 1


def _nothing_more(body, sock: socket.socket) -> bool:
    """After the promised bytes, wait briefly for the close we asked for: any further byte means it lied."""
    sock.settimeout(END_GRACE)
    try:
        return not body.read1(1)
    except (OSError, http.client.HTTPException):
        return True


def _validator(response: http.client.HTTPResponse) -> str:
    """What If-Range sends back: a strong ETag, else the Last-Modified date; empty when there is neither."""
    etag = response.getheader("ETag", "")
    return response.getheader("Last-Modified", "") if etag.startswith("W/") else etag


@dataclass
class _Sink:
    """Where one fetch's bytes go, in order: lent to `dest` in the fetch's own buffers where it takes them
    (`dest.write_lent(data, done)`, which calls `done` once it no longer reads `data`), else written."""

    dest: BinaryIO
    host: str
    max_bytes: int
    progress: Callable[[int], None] | None
    written: int = 0

    def check_size(self, total: int | None) -> None:
        if total is not None and total > self.max_bytes:
            raise FetchError(f"The file at {self.host} is larger than the {self.max_bytes} byte limit.")

    def hand_on(self, data: memoryview, done: reassembly.Done) -> None:
        if lend := getattr(self.dest, "write_lent", None):
            lend(data, done)
        else:
            self.dest.write(data)
            done()
        self.written += len(data)
        if self.progress:
            self.progress(self.written)


class _Stream:
    """A body read in order on one connection into the fetch's buffers: the one stream of a server that
    takes no ranges. A buffer's bytes are handed on once it is full, or at a pause in the stream; one
    part-filled when the connection drops is filled on from the resumed one, so the buffers stay aligned
    with the file."""

    def __init__(self, sink: _Sink, chunk_size: int):
        self.sink = sink
        self.buffers = reassembly.Buffers(chunk_size)
        self.filling: reassembly.Filling | None = None

    @property
    def position(self) -> int:
        held = self.filling.filled - self.filling.handed if self.filling else 0
        return self.sink.written + held

    def drain(self, response: http.client.HTTPResponse, sock: socket.socket, end: int | None) -> bool:
        """Read this response's body on to `end` (None: to its end); return whether it ended cleanly
        (False: the connection dropped)."""
        # http.client stops at Content-Length and would hide a longer body, so that one is read raw.
        read = response.readinto if response.chunked else response.fp.readinto1
        while end is None or self.position < end:
            if self.filling is None:
                self.filling = reassembly.Filling(self.buffers)
            # Without a length, one byte past the limit is asked for, to know that the body passes it.
            space = self.filling.space((self.sink.max_bytes + 1 if end is None else end) - self.position)
            try:
                count = read(space)
            except (OSError, http.client.HTTPException):
                return False
            self._filled(count, more=response.chunked or _more_now(sock))
            if not count or (response.chunked and count < len(space)):  # the body ended here
                return end is None
        if not response.chunked and not _nothing_more(response.fp, sock):
            raise FetchError(f"{self.sink.host} sent more bytes than its Content-Length announced.")
        return True

    def _filled(self, count: int, more: bool) -> None:
        self.filling.filled += count
        self.sink.check_size(self.position)
        if count and (self.filling.full or not more):
            self.sink.hand_on(*self.filling.piece())
        if self.filling.full:
            self.filling.let_go()
            self.filling = None

    def finish(self) -> None:
        """Hand on what the buffer under way holds."""
        if self.filling is not None:
            if self.filling.filled > self.filling.handed:
                self.sink.hand_on(*self.filling.piece())
            self.filling.let_go()
            self.filling = None


def _more_now(sock: socket.socket) -> bool:
    """Whether more of the body has come in already: bytes are handed on at a pause in the stream, not only
    in whole buffers, so that a slow source's reach staging as they arrive."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    return bool(select.select([sock], [], [], 0)[0])


def _one_stream(
    response: http.client.HTTPResponse,
    sock: socket.socket,
    stream: _Stream,
    url: str,
    total: int | None,
    validator: str,
    allowed_hosts: Sequence[str],
    timeout: float,
    max_redirects: int,
    max_resumes: int,
) -> tuple[http.client.HTTPResponse, socket.socket, str, int]:
    """The body of a plain answer, resumed where the connection drops; the last response, its socket, its
    URL and how many resumes it took."""
    host, resumes, end = stream.sink.host, 0, total
    while not stream.drain(response, sock, end) or (total is not None and stream.position < total):
        if resumes == max_resumes:
            raise FetchError(f"The connection to {host} dropped {resumes + 1} times; giving up.")
        response.close()
        sock.close()
        resumes += 1
        resume = {"Range": f"bytes={stream.position}-"} | ({"If-Range": validator} if validator else {})
        response, sock, url, target = _open(url, resume, allowed_hosts, timeout, max_redirects)
        total, end = _resumed(response, target.host, stream.position, total)
        stream.sink.check_size(total)
    stream.finish()
    return response, sock, url, resumes


class _Ranges:
    """A file fetched in parts over several connections at once, where its server answered the first
    request's range. Every connection goes to the address the first was checked and pinned to; a
    redirect is followed hop by hop, each hop checked; each part is asked for with If-Range and its
    answer must name the same file, so a part of a changed file is never spliced in. A connection that
    drops asks again for the rest of its part alone."""

    def __init__(
        self, first: http.client.HTTPResponse, sock: socket.socket, url: str, target: _Target, **options
    ) -> None:
        found = CONTENT_RANGE.fullmatch(first.getheader("Content-Range", "").strip())
        self.first: tuple[http.client.HTTPResponse, socket.socket] | None = (first, sock)
        self.first_stop, self.total = int(found[2]) + 1, int(found[3])
        self.url, self.target, self.host = url, target, target.host
        self.etag, self.validator = first.getheader("ETag", ""), _validator(first)
        self.allowed_hosts, self.timeout = options["allowed_hosts"], options["timeout"]
        self.max_redirects, self.max_resumes = options["max_redirects"], options["max_resumes"]
        self.sockets: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.resumes = 0

    @staticmethod
    def answered(response: http.client.HTTPResponse) -> bool:
        """Whether a 206 holds the first bytes of a file of a known size, as the first request asked."""
        found = CONTENT_RANGE.fullmatch(response.getheader("Content-Range", "").strip())
        return bool(found) and found[1] == "0" and found[3] != "*" and int(found[2]) < int(found[3])

    def bounds(self, part_bytes: int) -> list[tuple[int, int]]:
        """The first part, answered already, then parts of `part_bytes`; without a validator, the rest in one
        part, since parts of a file that cannot be named could come from two versions of it."""
        step = part_bytes if self.validator else self.total
        rest = range(self.first_stop, self.total, step)
        return [(0, self.first_stop)] + [(start, min(start + step, self.total)) for start in rest]

    def connection(self, parts: Iterator[reassembly.Part]) -> None:
        """One connection's parts in turn, on one connection kept alive between them."""
        connection = None
        try:
            for part in parts:
                connection = self._fill(part, connection)
        finally:
            if connection is not None:
                connection.close()

    def stop(self) -> None:
        """Wake every connection blocked on its socket: the fetch has stopped."""
        for sock in list(self.sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _fill(self, part: reassembly.Part, connection: _PinnedHTTPConnection | None) -> _PinnedHTTPConnection | None:
        """Read `part` whole, asking again from where a connection dropped; the connection to go on with."""
        drops = 0
        while part.left:
            if part.stopped:
                raise reassembly.Stopped
            response = sock = None
            whole = False
            try:
                connection, response, sock = self._ask(part, connection)
                whole = self._read(part, response, sock)
            except (_Dropped, _Unreachable, OSError, http.client.HTTPException) as error:
                drops = self._dropped(drops, error)
            finally:
                connection = self._let_go(connection, response, sock, whole)
        return connection

    def _dropped(self, drops: int, error: Exception) -> int:
        with self.lock:
            self.resumes += 1
        if drops < self.max_resumes:
            return drops + 1
        if isinstance(error, _Unreachable):
            raise error
        raise FetchError(f"The connection to {self.host} dropped {drops + 1} times; giving up.") from None

    def _let_go(
        self,
        connection: _PinnedHTTPConnection | None,
        response: http.client.HTTPResponse | None,
        sock: socket.socket | None,
        whole: bool,
    ) -> _PinnedHTTPConnection | None:
        """Close an answer; the connection to go on with: this one where its answer was read to its end on
        it, else none."""
        reusable = whole and connection is not None and sock is not None and connection.sock is sock
        if response is not None:
            response.close()  # its reader only: a connection kept alive keeps its socket
        if sock is not None:
            self.sockets.discard(sock)
        if reusable:
            return connection
        if connection is not None:
            connection.close()
        if sock is not None:
            sock.close()
        return None

    def _ask(
        self, part: reassembly.Part, connection: _PinnedHTTPConnection | None
    ) -> tuple[_PinnedHTTPConnection | None, http.client.HTTPResponse, socket.socket]:
        """The answer for the rest of `part`: the first response for the first part, else a ranged GET on
        this connection (or a new one), or on each hop of a redirect."""
        if part.start == 0 and self.first is not None:
            (response, sock), self.first = self.first, None
            self.sockets.add(sock)
            return connection, response, sock
        last = part.stop == self.total
        # The last part is asked to the file's end, on a connection then closed, to see it end there.
        headers = {"Range": f"bytes={part.position}-{'' if last else part.stop - 1}"}
        headers |= {"If-Range": self.validator, "Connection": "close" if last else "keep-alive"}
        if connection is None:
            connection = _connection(self.target, self.timeout)
        response = _send(connection, self.target, headers, self.timeout)
        sock = connection.pinned
        self.sockets.add(sock)
        if response.status in REDIRECTS:  # each hop checked; the connection, its body unread, is not reused
            url = _redirected(self.url, response, self.host)
            self.sockets.discard(sock)
            connection.close()
            hop = headers | {"Connection": "close"}
            response, sock, _, _ = _open(url, hop, self.allowed_hosts, self.timeout, self.max_redirects)
            self.sockets.add(sock)
            return None, response, sock
        return connection, response, sock

    def _read(self, part: reassembly.Part, response: http.client.HTTPResponse, sock: socket.socket) -> bool:
        """Read the answer's bytes of `part` into it; whether its body was read to its end. _Dropped when it
        ends short."""
        skip, count = self._answer(part, response)
        # Read raw, to the length the answer's range says (the last part's past it, to see it end there).
        read = response.readinto if response.chunked else response.fp.readinto1
        length, consumed = _length(response, self.host), 0
        while skip:
            got = read(part.space()[:skip])
            if not got:
                raise _Dropped
            skip, consumed = skip - got, consumed + got
        while count:
            got = read(part.space()[:count])
            if not got:
                raise _Dropped
            part.filled(got, more=response.chunked or _more_now(sock))
            count, consumed = count - got, consumed + got
        if part.stop == self.total and not response.chunked and not _nothing_more(response.fp, sock):
            raise FetchError(f"{self.host} sent more bytes than its Content-Length announced.")
        return response.isclosed() if response.chunked else consumed == length

    def _answer(self, part: reassembly.Part, response: http.client.HTTPResponse) -> tuple[int, int]:
        """Check the answer to a part's range; how many of its bytes come before the part's rest, and how
        many of the part's it holds."""
        status = response.status
        if status == 206:
            found = CONTENT_RANGE.fullmatch(response.getheader("Content-Range", "").strip())
            if not found:
                raise FetchError(f"{self.host} answered a range request without saying which bytes it sent.")
            if found[3] != str(self.total):
                raise FetchError(f"The file at {self.host} changed size while it was downloaded.")
            self._same_file(response)
            if int(found[1]) != part.position or int(found[2]) < part.position:
                raise FetchError(f"{self.host} sent other bytes than the range asked for.")
            return 0, min(int(found[2]) + 1, part.stop) - part.position
        if status == 200:  # the file changed (If-Range), or this server ignored the range: all of it came
            self._same_file(response)
            if _length(response, self.host) not in (None, self.total):
                raise FetchError(f"The file at {self.host} changed size while it was downloaded.")
            return part.position, part.left
        if status in (412, 416):
            raise FetchError(
                f"The file at {self.host} changed while it was downloaded; stage it again once it is complete."
            )
        if status >= 500:
            raise _Dropped
        raise FetchError(f"{self.host} answered HTTP {status} {response.reason}".rstrip() + " to a range request.")

    def _same_file(self, response: http.client.HTTPResponse) -> None:
        """FetchError when the answer names another version of the file than the first did."""
        etag, modified = response.getheader("ETag"), response.getheader("Last-Modified")
        if self.etag and etag and etag != self.etag:
            was = f"its ETag was {self.etag} and is now {etag}"
        elif self.validator and not self.etag.startswith('"') and modified and modified != self.validator:
            was = f"it was last modified {self.validator} and now {modified}"
        else:
            return
        raise FetchError(
            f"The file at {self.host} changed while it was downloaded ({was}); stage it again once it is complete."
        )


def fetch(
    url: str,
    dest: BinaryIO,
    *,
    max_bytes: int,
    allowed_hosts: Sequence[str] = (),
    timeout: float = 30.0,
    max_redirects: int = 5,
    max_resumes: int = 5,
    chunk_size: int = 1024 * 1024,
    progress: Callable[[int], None] | None = None,
    on_length: Callable[[int | None], None] | None = None,
    connections: int = CONNECTIONS,
    part_bytes: int = PART_BYTES,
) -> Fetched:
    """Stream url's body into dest (a writable binary file, written in order only; or one that takes
    the fetch's buffers lent, `write_lent`); FetchError for anything refused or failed. `on_length`
    hears the body's length (None: not announced) before any of it is written.

    The first GET asks for the first `part_bytes` as a range: a server that answers with them (206) has
    the rest fetched in parts over `connections` connections at once; one that sends the whole body
    (200) streams it on the one connection. `timeout` bounds each connect and each read, not the whole
    transfer.
    """
    asked = {"Range": f"bytes=0-{part_bytes - 1}"} if connections > 1 else {}
    options = {"allowed_hosts": allowed_hosts, "timeout": timeout, "max_redirects": max_redirects}
    response, sock, url, target = _open(url, asked, **options)
    if asked and response.status in (206, 416) and not _Ranges.answered(response):
        response.close()  # an empty file (416), or a range it did not make sense of: the file whole, then
        sock.close()
        response, sock, url, target = _open(url, {}, **options)
    host = target.host
    sink = _Sink(dest, host, max_bytes, progress)
    try:
        if response.status not in (200, 206):
            raise FetchError(f"{host} answered HTTP {response.status} {response.reason}".rstrip() + ".")
        content_type = response.getheader("Content-Type", "")
        if response.status == 206:
            ranges = _Ranges(response, sock, url, target, max_resumes=max_resumes, **options)
            sink.check_size(ranges.total)
            if on_length:
                on_length(ranges.total)
            reassembly.fetch_in_parts(
                ranges.bounds(part_bytes), ranges.connection, sink.hand_on,
                connections=connections if ranges.validator else 1, chunk=chunk_size, stop=ranges.stop,
            )  # fmt: skip
            return Fetched(sink.written, url, content_type, ranges.resumes)
        total = _length(response, host)
        sink.check_size(total)
        if on_length:
            on_length(total)
        stream = _Stream(sink, chunk_size)
        response, sock, url, resumes = _one_stream(
            response, sock, stream, url, total, _validator(response), max_resumes=max_resumes, **options
        )
    finally:
        response.close()
        sock.close()
    return Fetched(sink.written, url, content_type, resumes)


@dataclass(frozen=True)
class Posted:
    status: int
    reason: str


def post(
    url: str, body: bytes, headers: dict[str, str], *, allowed_hosts: Sequence[str] = (), timeout: float = 10.0
) -> Posted:
    """POST `body` to url, checked and pinned as a fetch is; the answer's status, its body left unread.

    A redirect is not followed: the body is not sent again elsewhere on the word of a 3xx. `timeout` bounds
    the connect and each read. FetchError when the URL is refused or nothing answers."""
    response, sock = _request(_target(url, allowed_hosts), headers, timeout, method="POST", body=body)
    try:
        return Posted(response.status, response.reason)
    finally:
        response.close()
        sock.close()
