"""Who a request comes from, for the login lockout (django-axes) and the limits on the intake form and the
password reset."""

import ipaddress
import logging
import math

import redis
from django.conf import settings
from django.http import HttpRequest
from rest_framework.throttling import SimpleRateThrottle

from portal.text import ascii_count

log = logging.getLogger(__name__)


def client_ip(request: HttpRequest, ipv6_prefix: int = 64) -> str | None:
    """The client's address: the connection's, or behind E31_TRUSTED_PROXIES proxies the one the outermost
    of them saw (with a port some proxies add, or IPv6 in brackets, read the same). An IPv6 client is its
    /64, which one host holds whole and can pick addresses from (or a wider `ipv6_prefix`); an IPv4 client
    reaching a server that listens on IPv6 is its IPv4 address. None when there is no address to read
    (Django's force_login; a unix socket with no proxy counted): logged, since clients then look alike."""
    address = request.META.get("REMOTE_ADDR", "")
    if settings.E31_TRUSTED_PROXIES:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        # Fewer addresses than proxies: the request did not come through them all, and the connection's
        # address is the only one nobody outside could write.
        if len(forwarded) >= settings.E31_TRUSTED_PROXIES:
            address = _without_port(forwarded[-settings.E31_TRUSTED_PROXIES]) or address
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        if request.method == "POST":
            log.error("no client address in %r: set E31_TRUSTED_PROXIES to the proxies in front of the portal", address)
        return None
    if ip.version == 6 and ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/{ipv6_prefix}", strict=False).network_address)
    return str(ip)


def _without_port(entry: str) -> str:
    """1.2.3.4:5678 → 1.2.3.4, [2001:db8::1]:443 → 2001:db8::1; a bare address as it is."""
    if entry.startswith("["):
        return entry[1:].partition("]")[0]
    host, colon, port = entry.rpartition(":")
    return host if colon and "." in host and ascii_count(port) is not None else entry


def intake_wait(request: HttpRequest) -> int:
    """Count this post of the intake form against its client's hour; the seconds until that hour is out if the
    client has sent more than E31_INTAKE_POSTS_PER_HOUR in it, else 0."""
    return _posts_wait(request, "intake", settings.E31_INTAKE_POSTS_PER_HOUR)


def password_reset_wait(request: HttpRequest) -> int:
    """Count this ask for a password reset against its client's hour, as intake_wait does, with
    E31_PASSWORD_RESETS_PER_HOUR: each ask sends an email to someone who may not have asked."""
    return _posts_wait(request, "password-reset", settings.E31_PASSWORD_RESETS_PER_HOUR)


class PostsPerHour(SimpleRateThrottle):
    """So many posts of a form from one client in any hour: a sliding hour (Django REST framework's log of
    each taken post's time, in the default cache that every web process shares), so posts across the turn of
    a clock hour count together. A refused post is not counted: the wait it is told is the wait it gets."""

    def __init__(self, group: str, per_hour: int):
        self.scope, self.rate = group, f"{per_hour}/hour"
        super().__init__()

    def get_cache_key(self, request, view) -> str:
        # An IPv6 /56: a home or office is often given one, and could send from each of its /64s.
        return self.cache_format % {"scope": self.scope, "ident": client_ip(request, ipv6_prefix=56) or "unknown"}


def _posts_wait(request: HttpRequest, group: str, per_hour: int) -> int:
    limit = PostsPerHour(group, per_hour)
    try:
        if limit.allow_request(request, None):
            return 0
    except redis.RedisError as error:
        # The form is worth more than the limit: without the cache it is taken unlimited.
        log.warning("The %s form's limit is not counted, the cache is unreachable: %s", group, error)
        return 0
    return max(math.ceil(limit.wait() or 0), 1)


class FailuresPerHour(PostsPerHour):
    """Failed logins from one client in any hour, whatever usernames they tried (password spraying: the lockout
    per username and address lets one address try a few passwords on every account). Counted on failure,
    checked before the next try."""

    def __init__(self):
        super().__init__("login-failures", settings.E31_LOGIN_FAILURES_PER_ADDRESS_PER_HOUR)

    def _read(self, request) -> None:
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()

    def wait_for(self, request) -> int:
        """The seconds until the client may try again; 0 while it is under the limit."""
        self._read(request)
        return 0 if len(self.history) < self.num_requests else max(math.ceil(self.wait() or 0), 1)

    def count(self, request) -> None:
        self._read(request)
        self.throttle_success()


def login_failures_wait(request: HttpRequest) -> int:
    """The seconds the client's address waits before its next login; without the cache, none (logged)."""
    try:
        return FailuresPerHour().wait_for(request)
    except redis.RedisError as error:
        log.warning("Failed logins per address are not counted, the cache is unreachable: %s", error)
        return 0


def count_login_failure(request: HttpRequest) -> None:
    try:
        FailuresPerHour().count(request)
    except redis.RedisError as error:
        log.warning("A failed login is not counted against its address, the cache is unreachable: %s", error)
