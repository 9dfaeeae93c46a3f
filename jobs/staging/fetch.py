"""Fetching a dataset by URL for staging: http(s) only, public addresses only, streamed, resumable; and
posting to a URL (a webhook) through the same guard.

Each hop (redirects included) is resolved once, every address the host resolves to is checked, and the TCP
connection is opened to a checked address by us, so DNS cannot answer differently between check and connect
(rebinding). The host name still goes in the Host header, and for https in SNI and the certificate check.
Hosts an operator lists in `allowed_hosts` skip the public-address check but are pinned all the same.

The body goes to `dest` as it arrives. A connection dropped mid-body is resumed with `Range: bytes=N-`
(and `If-Range`, so a changed file is not spliced); a server that answers with the whole body again ends the
fetch instead of restarting it, since `dest` need not be seekable and a restart could loop on a flaky host.
"""

import http.client
import ipaddress
import re
import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import quote, urljoin, urlsplit

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


def _request(
    target: _Target, headers: dict[str, str], timeout: float, method: str = "GET", body: bytes | None = None
) -> tuple[http.client.HTTPResponse, socket.socket]:
    """Send one request; return the response and its socket. Connection failures become FetchErrors."""
    kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    connection = kind(target, timeout)
    where = f"{target.host} (port {target.port})"
    try:
        connection.request(method, target.path, body=body, headers={**HEADERS, **headers})
        return connection.getresponse(), connection.pinned
    except ssl.SSLCertVerificationError as error:
        message = f"The certificate of {target.host} could not be verified ({error.verify_message})."
    except ConnectionRefusedError:
        message = f"{where} refused the connection."
    except TimeoutError:
        message = f"{where} did not answer within {timeout:g} s."
    except (OSError, http.client.HTTPException) as error:
        message = f"{where} could not be reached ({error or type(error).__name__})."
    connection.close()
    raise FetchError(message)


def _open(
    url: str, headers: dict[str, str], allowed_hosts: Sequence[str], timeout: float, max_redirects: int
) -> tuple[http.client.HTTPResponse, socket.socket, str, str]:
    """GET url, following redirects (each hop checked anew); return response, socket, its URL and host."""
    for _ in range(max_redirects + 1):
        target = _target(url, allowed_hosts)
        response, sock = _request(target, headers, timeout)
        if response.status not in REDIRECTS:
            return response, sock, url, target.host
        location = response.getheader("Location")
        response.close()
        sock.close()
        if not location:
            raise FetchError(f"{target.host} answered HTTP {response.status} without saying where to.")
        url = urljoin(url, location)
    raise FetchError(f"The URL redirected more than {max_redirects} times (last to {target.host}).")


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


def _read(body, want: int) -> bytes | None:
    """The next bytes, b"" at a clean end, None when the connection dropped."""
    try:
        return body.read1(want)
    except (OSError, http.client.HTTPException):
        return None


def _nothing_more(body, sock: socket.socket) -> bool:
    """After the promised bytes, wait briefly for the close we asked for: any further byte means it lied."""
    sock.settimeout(END_GRACE)
    return not _read(body, 1)


@dataclass
class _Copy:
    """One fetch's progress across the connections it takes."""

    dest: BinaryIO
    host: str
    max_bytes: int
    chunk_size: int
    progress: Callable[[int], None] | None
    written: int = 0

    def check_size(self, total: int | None) -> None:
        if total is not None and total > self.max_bytes:
            raise FetchError(f"The file at {self.host} is larger than the {self.max_bytes} byte limit.")

    def drain(self, response: http.client.HTTPResponse, sock: socket.socket, end: int | None) -> bool:
        """Copy this response's body; return whether it ended cleanly (False: the connection dropped)."""
        # http.client stops at Content-Length and would hide a longer body, so that one is read raw.
        body = response if response.chunked else response.fp
        while end is None or self.written < end:
            want = self.chunk_size if end is None else min(self.chunk_size, end - self.written)
            data = _read(body, want)
            if not data:
                return data == b"" and end is None
            self.check_size(self.written + len(data))
            self.dest.write(data)
            self.written += len(data)
            if self.progress:
                self.progress(self.written)
        if not _nothing_more(body, sock):
            raise FetchError(f"{self.host} sent more bytes than its Content-Length announced.")
        return True


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
) -> Fetched:
    """Stream url's body into dest (a writable binary file, written in order only); FetchError for
    anything refused or failed. `on_length` hears the body's length (None: not announced) before
    any of it is written.

    `timeout` bounds each connect and each read, not the whole transfer.
    """
    response, sock, url, host = _open(url, {}, allowed_hosts, timeout, max_redirects)
    copy = _Copy(dest, host, max_bytes, chunk_size, progress)
    try:
        if response.status != 200:
            raise FetchError(f"{host} answered HTTP {response.status} {response.reason}".rstrip() + ".")
        total = _length(response, host)
        copy.check_size(total)
        if on_length:
            on_length(total)
        content_type = response.getheader("Content-Type", "")
        validator = response.getheader("ETag", "")
        validator = response.getheader("Last-Modified", "") if validator.startswith("W/") else validator
        resumes = 0
        end = total
        while not copy.drain(response, sock, end) or (total is not None and copy.written < total):
            if resumes == max_resumes:
                raise FetchError(f"The connection to {host} dropped {resumes + 1} times; giving up.")
            response.close()
            sock.close()
            resumes += 1
            resume = {"Range": f"bytes={copy.written}-"} | ({"If-Range": validator} if validator else {})
            response, sock, url, host = _open(url, resume, allowed_hosts, timeout, max_redirects)
            total, end = _resumed(response, host, copy.written, total)
            copy.check_size(total)
    finally:
        response.close()
        sock.close()
    return Fetched(copy.written, url, content_type, resumes)


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
