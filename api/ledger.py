"""The ledger routes (docs/api.md, "Ledger"): the organisation's entries in pages, and the whole (filtered)
ledger streamed as CSV or JSON by billing's own exports, in flat memory."""

from datetime import UTC, datetime

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view

from api.negotiation import any_accept
from api.pagination import PageParameters, Pages, query
from api.schema import OBJECT, answers
from billing import exports
from billing.metering import ledger_row
from billing.models import LedgerEntry
from jobs.services import get_job_for_user
from portal.models import organisation_for


class LedgerFilters(serializers.Serializer):
    month = serializers.RegexField(
        r"^\d{4}-(0[1-9]|1[0-2])$", required=False, help_text="YYYY-MM: the entries that ended in that month (UTC)"
    )
    job = serializers.IntegerField(required=False, min_value=1, help_text="one job's entries")


class PagedLedgerFilters(LedgerFilters, PageParameters):
    pass


def _entries(request, filters: type[serializers.Serializer]):
    wanted = query(request, filters)
    entries = LedgerEntry.objects.filter(organisation=organisation_for(request.user)).order_by("-held_to", "-pk")
    if "job" in wanted:
        entries = entries.filter(job=get_job_for_user(request, wanted["job"]))
    if "month" in wanted:
        year, month = map(int, wanted["month"].split("-"))
        start = datetime(year, month, 1, tzinfo=UTC)
        end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
        entries = entries.filter(held_to__gte=start, held_to__lt=end)
    return entries


@extend_schema(
    operation_id="ledger",
    summary="The organisation's ledger entries, newest first",
    parameters=[PagedLedgerFilters],
    responses=answers(OBJECT, 400, 403, 404),
)
@api_view(["GET"])
def ledger(request):
    entries = _entries(request, PagedLedgerFilters)
    pages = Pages()
    page = pages.paginate_queryset(entries, request)
    return pages.get_paginated_response([ledger_row(entry) for entry in page])


@extend_schema(
    operation_id="ledger_csv",
    summary="The whole (filtered) ledger as CSV, streamed",
    parameters=[LedgerFilters],
    responses=answers(str, 400, 403, 404),
)
@api_view(["GET"])
@any_accept
def ledger_csv(request):
    return exports.csv_response(_entries(request, LedgerFilters), organisation_for(request.user))


@extend_schema(
    operation_id="ledger_json",
    summary="The whole (filtered) ledger as JSON, streamed",
    parameters=[LedgerFilters],
    responses=answers(OBJECT, 400, 403, 404),
)
@api_view(["GET"])
@any_accept
def ledger_json(request):
    return exports.json_response(_entries(request, LedgerFilters), organisation_for(request.user))
