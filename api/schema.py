"""What the OpenAPI schema says beyond what drf-spectacular reads off the views: the bearer token, and the error
body every route may answer. Imported when the app is ready, so the extension is registered."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema):
        scheme = build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")
        return {**scheme, "description": "A personal API token (e31_…) from the portal's API tokens page."}


ERROR = inline_serializer(
    "Error",
    {
        "error": inline_serializer(
            "ErrorDetail",
            {
                "code": serializers.CharField(),
                "message": serializers.CharField(),
                "field": serializers.CharField(required=False),
                "errors": serializers.ListField(
                    child=inline_serializer(
                        "Refusal",
                        {"field": serializers.CharField(required=False), "message": serializers.CharField()},
                    ),
                    required=False,
                    help_text="With a 400: every value refused, the first being `field` and `message`.",
                ),
            },
        )
    },
)


def answers(ok, *statuses: int, ok_status: int = 200) -> dict:
    """A route's responses for extend_schema: what it answers on success, and the errors it may answer."""
    return {ok_status: ok, **{status: OpenApiResponse(ERROR) for status in (401, *statuses, 429)}}


OBJECT = OpenApiTypes.OBJECT
