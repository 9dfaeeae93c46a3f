"""The API's own routes: the index of routes, who the token belongs to and the work kinds. The job and
ledger routes are in jobs.py and ledger.py beside it."""

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, authentication_classes, permission_classes, throttle_classes
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response

from api.schema import OBJECT, answers
from api.throttling import AddressRate
from jobs import processors, scheduling
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
            "work_kinds": reverse("api:work_kinds"),
            "ledger": reverse("api:ledger"),
        }
    )


@extend_schema(
    operation_id="work_kinds",
    summary="The work kinds a job may name, their parameters, and whether an online node runs each",
    responses=answers(OBJECT),
)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def work_kinds(request):
    """What `work.kind` and `work.params` may say, for a client to check before it uploads the data."""
    online = scheduling.fleet().work_kinds
    return Response(
        [
            {
                "name": processor.name,
                "title": processor.title,
                "description": processor.description,
                "input_formats": list(processor.input_formats),
                "model_file": processor.model_file,
                "runs_online": processor.name in online,
                "params": [
                    {
                        "name": param.name,
                        "type": param.kind.__name__,
                        "default": param.default,
                        "minimum": param.minimum,
                        "maximum": param.maximum,
                        "help": param.help,
                    }
                    for param in processor.params
                ],
            }
            for processor in processors.available()
        ]
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
