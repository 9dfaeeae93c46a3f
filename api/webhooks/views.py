"""The webhook routes (docs/api.md, "Webhooks"): the organisation's endpoints (list, make, remove) and a job's
delivery log. An endpoint of another organisation is 404, as a job is."""

from django.db import transaction
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.response import Response

from api.errors import invalid
from api.idempotency import KEY_PARAMETER, idempotent
from api.pagination import Pages
from api.representation import at
from api.schema import OBJECT, answers
from api.webhooks import delivery, endpoints
from api.webhooks.models import Delivery, Endpoint
from jobs.services import get_job_for_user
from portal.models import organisation_for

MAX_ENDPOINTS = 10


def endpoint_json(endpoint: Endpoint) -> dict:
    return {
        "id": endpoint.pk,
        "url": endpoint.url,
        "created": at(endpoint.created),
        "created_by": endpoint.created_by and endpoint.created_by.get_username(),
    }


class EndpointIn(serializers.Serializer):
    url = serializers.CharField(trim_whitespace=False)


@extend_schema(
    summary="The organisation's webhook endpoints; POST makes one and shows its secret, once",
    request=EndpointIn,
    parameters=[KEY_PARAMETER],
    responses={**answers(OBJECT, 400, 403), 201: OBJECT},
)
@api_view(["GET", "POST"])
@idempotent
def endpoint_list(request):
    organisation = organisation_for(request.user)
    mine = Endpoint.objects.of_organisation(organisation).select_related("created_by")
    if request.method == "GET":
        return Response([endpoint_json(found) for found in mine])
    given = EndpointIn(data=request.data)
    given.is_valid(raise_exception=True)
    url = endpoints.check_target("url", given.validated_data["url"])
    if mine.count() >= MAX_ENDPOINTS:
        raise invalid("url", f"An organisation has at most {MAX_ENDPOINTS} webhook endpoints; remove one first.")
    made, secret = endpoints.make(organisation, url, request.user)
    headers = {"Location": f"{request.path}{made.pk}/"}
    return Response({**endpoint_json(made), "secret": secret}, status=status.HTTP_201_CREATED, headers=headers)


@extend_schema(summary="Remove a webhook endpoint: its pending deliveries stop", responses=answers(None, 403, 404))
@api_view(["DELETE"])
def endpoint_detail(request, pk: int):
    found = get_object_or_404(Endpoint.objects.of_organisation(organisation_for(request.user)), pk=pk)
    with transaction.atomic():
        Endpoint.objects.filter(pk=found.pk).update(removed_at=timezone.now())
        delivery.stop_for(found)
    return Response(status=status.HTTP_204_NO_CONTENT)


def delivery_json(sent: Delivery) -> dict:
    return {
        "id": str(sent.pk),
        "url": sent.url,
        "endpoint": None if sent.endpoint.job_id else sent.endpoint_id,
        "event": sent.event,
        "state": sent.state,
        "previous_state": sent.previous_state,
        "changed_at": at(sent.changed_at),
        "status": sent.status,
        "next_attempt_at": at(sent.next_attempt_at),
        "delivered_at": at(sent.delivered_at),
        "attempts": [
            {
                "number": attempt.number,
                "at": at(attempt.at),
                "http_status": attempt.http_status,
                "error": attempt.error,
                "duration_ms": attempt.duration_ms,
            }
            for attempt in sent.attempt_log.all()
        ],
    }


@extend_schema(summary="The webhook deliveries about the job, newest first", responses=answers(OBJECT, 403, 404))
@api_view(["GET"])
def job_deliveries(request, pk: int):
    job = get_job_for_user(request, pk)
    sent = job.webhook_deliveries.select_related("endpoint").prefetch_related("attempt_log")
    pages = Pages()
    page = pages.paginate_queryset(sent, request)
    return pages.get_paginated_response([delivery_json(found) for found in page])
