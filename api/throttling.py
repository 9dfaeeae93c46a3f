"""Rate limits (docs/api.md, "Limits"): per token, E31_API_RATE for every route; per organisation,
E31_API_SUBMIT_RATE on top for the routes that create jobs (a second token must not start a fresh count); per
client address, E31_API_ADDRESS_RATE for the requests without a valid
token (the public pages, a missing token, a refused one). Past one, 429 with Retry-After (errors.py). Counted
in the default cache (Redis), shared by every web process. The rate is read from settings on each request,
so a test can change it."""

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import SimpleRateThrottle

from portal.models import organisation_for
from portal.throttling import client_ip


class TokenRate(SimpleRateThrottle):
    scope = "api"
    setting = "E31_API_RATE"

    def get_rate(self) -> str:
        return getattr(settings, self.setting)

    def get_cache_key(self, request, view) -> str | None:
        if request.auth is None:
            return None  # the public pages (index, schema, docs) and a refused token are not counted
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class SubmitRate(TokenRate):
    """For the views that create a job (the create and pass routes), in their throttle_classes beside TokenRate,
    counted per organisation, whichever of its tokens made the job. A reading (GET, HEAD, OPTIONS) is not
    counted: the list of jobs and their creation share a route. Only a job made counts (the view calls `made`
    once it is): a submission refused for what it says costs nothing, so that a partner correcting a typo is not
    locked out. Past the rate, the 429 names it (errors.py)."""

    scope = "api-submit"
    setting = "E31_API_SUBMIT_RATE"

    def allow_request(self, request, view) -> bool:
        if request.method in SAFE_METHODS or super().allow_request(request, view):
            return True
        count, period = self.get_rate().split("/")
        unit = {"s": "second", "m": "minute", "h": "hour", "d": "day"}[period[0]]
        request.e31_limit = f"jobs made by one organisation (E31_API_SUBMIT_RATE is {count} per {unit})"
        return False

    def get_cache_key(self, request, view) -> str | None:
        if request.auth is None:
            return None
        organisation = organisation_for(request.user)
        ident = f"organisation-{organisation.pk}" if organisation else f"token-{request.auth.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def throttle_success(self) -> bool:
        return True  # not counted yet: `made` counts the job once it is made

    def made(self, request) -> None:
        """Count the job the request made against its organisation's rate."""
        self.key = self.get_cache_key(request, None)
        if self.key is None:
            return
        self.now = self.timer()
        self.history = [moment for moment in self.cache.get(self.key, []) if moment > self.now - self.duration]
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, self.duration)


class AddressRate(TokenRate):
    """The requests without a valid token, per client address (portal.throttling.client_ip): counted by the
    authentication for a missing or refused token (a valid one is never held up by its neighbours behind the
    same address), and in the throttle_classes of the pages that authenticate nobody (the index, the docs)."""

    scope = "api-address"
    setting = "E31_API_ADDRESS_RATE"

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": client_ip(request) or "unknown"}
