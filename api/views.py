"""The API's own routes: the index of routes and who the token belongs to. The job and ledger routes are in
jobs.py and ledger.py beside it."""

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, authentication_classes, permission_classes, throttle_classes
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response

from api.schema import OBJECT, answers
from api.throttling import AddressRate
from portal.models import organisation_for


@extend_schema(
    operation_id="index",
    summary="The API's version and where its routes and documentation are",
    responses=OBJECT,
    auth=[],
)
@api_view(["GET"])
@authentication_classes([])
@permission_classes([AllowAny])
@throttle_classes([AddressRate])
def index(request):
    return Response(
        {
            "version": "1",
            "schema": reverse("api:schema"),
            "docs": reverse("api:docs"),
            "contract": "docs/api.md",
            "me": reverse("api:me"),
            "jobs": reverse("api:jobs"),
            "ledger": reverse("api:ledger"),
        }
    )


@extend_schema(
    operation_id="me", summary="The token's user, their organisation and the token itself", responses=answers(OBJECT)
)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def me(request):
    """Who the token acts as. Any valid token may ask, an operator's too (organisation null): a client can
    check a token with it before anything else."""
    organisation = organisation_for(request.user)
    token = request.auth
    return Response(
        {
            "username": request.user.get_username(),
            "email": request.user.email,
            "organisation": organisation and {"name": organisation.name, "slug": organisation.slug},
            "token": {
                "name": token.name,
                "created": token.created,
                "expiry": token.expiry,
                "last_used_at": token.last_used_at,
            },
        }
    )
