"""The ledger through the API: entries in pages, newest first, by month or job; and the whole (filtered) ledger
as CSV and JSON, streamed row by row (StreamingHttpResponse), the same rows as billing's exports."""

import csv
import io
import json
from datetime import UTC, datetime

import pytest

from billing import exports
from billing.anchor import head_of
from billing.metering import ledger_row
from billing.models import LedgerEntry
from tests.api.support import entry
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger(organisation):
    """Three jobs' holds, ended in November, December and December 2026, and seven corrections of the first in
    October."""
    jobs = [make_job(organisation, "succeeded") for _ in range(3)]
    entry(jobs[0], ended=datetime(2026, 11, 30, 23, 59, tzinfo=UTC))
    entry(jobs[1], ended=datetime(2026, 12, 1, 0, 0, tzinfo=UTC))
    entry(jobs[2], ended=datetime(2026, 12, 15, tzinfo=UTC))
    for day in range(1, 8):
        entry(jobs[0], ended=datetime(2026, 10, day, tzinfo=UTC), kind=LedgerEntry.Kind.CORRECTION, amount="0.0001")
    return jobs


@pytest.fixture
def small_chunks(monkeypatch):
    """The exports read the entries three at a time, so that ten cross chunks as a long ledger does."""
    monkeypatch.setattr(exports, "CHUNK", 3)


def rows(entries) -> list[dict]:
    return [ledger_row(each) for each in entries.order_by("-held_to", "-pk")]


def test_it_pages_the_entries_newest_first(ledger, partner_api, organisation):
    page = partner_api.get("/api/v1/ledger/?page_size=2").json()
    assert page["count"] == 10
    assert page["results"] == rows(LedgerEntry.objects.filter(organisation=organisation))[:2]


def test_it_filters_by_month_and_job(ledger, partner_api):
    december = partner_api.get("/api/v1/ledger/?month=2026-12").json()["results"]
    assert [row["job"] for row in december] == [ledger[2].pk, ledger[1].pk]
    november = partner_api.get("/api/v1/ledger/?month=2026-11").json()["results"]
    assert [row["job"] for row in november] == [ledger[0].pk], "the last minute of November is November's"
    assert partner_api.get("/api/v1/ledger/?month=2026-10").json()["count"] == 7
    one_job = partner_api.get(f"/api/v1/ledger/?job={ledger[1].pk}").json()["results"]
    assert [row["job"] for row in one_job] == [ledger[1].pk]


def test_the_csv_streams_every_row_of_the_export(ledger, small_chunks, partner_api, partner, organisation):
    answer = partner_api.get("/api/v1/ledger.csv", headers={"Accept": "text/csv"})
    assert answer.status_code == 200 and answer.streaming
    assert answer["Content-Type"] == "text/csv; charset=utf-8"
    body = answer.getvalue().decode()
    *parsed, head = csv.DictReader(io.StringIO(body))
    expected = [{name: "" if value is None else str(value) for name, value in row.items()} for row in rows(
        LedgerEntry.objects.filter(organisation=organisation))]  # fmt: skip
    assert parsed == expected
    assert (head["kind"], head["reason"]) == ("head", head_of(organisation).line), "then the ledger's head"
    assert body == client_for(partner).get("/billing/ledger.csv").getvalue().decode(), "the page's export, the same"


def test_the_json_streams_every_row_and_filters_as_the_pages_do(ledger, small_chunks, partner_api, organisation):
    answer = partner_api.get("/api/v1/ledger.json")
    assert answer.status_code == 200 and answer.streaming
    assert json.loads(answer.getvalue()) == {
        "ledger_head": head_of(organisation).as_json(),
        "entries": rows(LedgerEntry.objects.filter(organisation=organisation)),
    }
    december = json.loads(partner_api.get("/api/v1/ledger.json?month=2026-12").getvalue())["entries"]
    assert [row["job"] for row in december] == [ledger[2].pk, ledger[1].pk]
    csv_december = partner_api.get(f"/api/v1/ledger.csv?job={ledger[2].pk}").getvalue().decode()
    assert len(list(csv.DictReader(io.StringIO(csv_december)))) == 2, "its entry, and the ledger's head"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("month=2026-13", "month"),
        ("month=2026-1", "month"),
        ("month=december", "month"),
        ("job=abc", "job"),
        ("job=0", "job"),
        ("job=-4", "job"),
        ("from=2026-12", "from"),
    ],
)
def test_a_bad_filter_is_refused_naming_it(ledger, partner_api, query, field):
    for route in ("ledger/", "ledger.csv", "ledger.json"):
        answer = partner_api.get(f"/api/v1/{route}?{query}")
        assert answer.status_code == 400, route
        assert answer["Content-Type"] == "application/json"
        error = answer.json()["error"]
        assert error["code"] == "invalid" and error["field"] == field, error
