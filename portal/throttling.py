"""Who a request comes from, for the login lockout (django-axes) and the intake form's limit."""

import ipaddress
import logging

import redis
from django.conf import settings
from django.http import HttpRequest
from django_ratelimit.core import get_usage

log = logging.getLogger(__name__)


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: the connection's, or behind E31_TRUSTED_PROXIES proxies the one the outermost
    of them saw; None for a request without one (as Django's force_login builds). An IPv6 client is its /64,
    which one host holds whole and can pick addresses from; an IPv4 client reaching a server that listens on
    IPv6 is its IPv4 address."""
    address = request.META.get("REMOTE_ADDR", "")
    if settings.E31_TRUSTED_PROXIES:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        # Fewer addresses than proxies: the request did not come through them all, and the connection's
        # address is the only one nobody outside could write.
        if len(forwarded) >= settings.E31_TRUSTED_PROXIES:
            address = forwarded[-settings.E31_TRUSTED_PROXIES] or address
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if ip.version == 6 and ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False).network_address)
    return str(ip)


def intake_wait(request: HttpRequest) -> int:
    """Count this post of the intake form against its client's hour; the seconds until that hour is out if the
    client has sent more than E31_INTAKE_POSTS_PER_HOUR in it, else 0."""
    try:
        usage = get_usage(
            request,
            group="intake",
            key=lambda group, request: client_ip(request) or "unknown",
            rate=f"{settings.E31_INTAKE_POSTS_PER_HOUR}/h",
            method="POST",
            increment=True,
        )
    except redis.RedisError as error:
        # An application is worth more than the limit: without the cache it is taken unlimited.
        log.warning("The intake form's limit is not counted, the cache is unreachable: %s", error)
        return 0
    if usage is None or not usage["should_limit"]:
        return 0
    return max(usage["time_left"], 1)
