"""Who a request comes from, for the login lockout (django-axes) and the intake form's limit."""

import ipaddress

from django.conf import settings
from django.http import HttpRequest


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
