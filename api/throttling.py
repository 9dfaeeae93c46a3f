"""Rate limits per token (docs/api.md, "Limits"): E31_API_RATE for every route, E31_API_SUBMIT_RATE on top for
the routes that create jobs. Past one, 429 with Retry-After (errors.py). Counted in the default cache (Redis),
shared by every web process. The rate is read from settings on each request, so a test can change it."""

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import SimpleRateThrottle


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
    """For the views that create a job (the create and pass routes), in their throttle_classes beside TokenRate.
    A reading (GET, HEAD, OPTIONS) is not counted: the list of jobs and their creation share a route."""

    scope = "api-submit"
    setting = "E31_API_SUBMIT_RATE"

    def allow_request(self, request, view) -> bool:
        return request.method in SAFE_METHODS or super().allow_request(request, view)
