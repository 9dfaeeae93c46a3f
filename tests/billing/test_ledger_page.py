"""The ledger page: a page of entries at a time, newest first, filtered by the month they ended in and by job,
with the totals of every entry the filters keep; its exports stream the same entries."""

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from billing.models import LedgerEntry
from tests.api.support import entry
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db

LEDGER = "/billing/ledger/"
DECEMBER = datetime(2026, 12, 1, tzinfo=UTC)


def _jobs_listed(page: str) -> list[str]:
    return [cell.split("/")[0] for cell in page.split('<td><a href="/jobs/')[1:]]


@pytest.fixture
def ledger(organisation):
    """A job's hold ended in November, and 54 corrections of another job, one a minute from 1 December."""
    november, december = make_job(organisation, "succeeded"), make_job(organisation, "succeeded")
    entry(november, ended=DECEMBER - timedelta(minutes=1))
    for minute in range(54):
        entry(december, ended=DECEMBER + timedelta(minutes=minute), kind=LedgerEntry.Kind.CORRECTION, amount="1")
    return november, december


def test_it_pages_the_entries_newest_first_with_the_totals_of_all(ledger, partner_client):
    november, december = ledger
    first = partner_client.get(LEDGER).content.decode()
    assert _jobs_listed(first) == [str(december.pk)] * 50
    assert "Page 1 of 2 · 1–50 of 55 entries" in first
    assert "Total of all 55 entries" in first and "57.60 USD" in first, "54 × 1 + 3.6, not the page's"
    last = partner_client.get(LEDGER, {"page": "2"}).content.decode()
    assert _jobs_listed(last) == [str(december.pk)] * 4 + [str(november.pk)]


def test_it_filters_by_month_and_job(ledger, partner_client):
    november, december = ledger
    page = partner_client.get(LEDGER, {"month": "2026-11"}).content.decode()
    assert _jobs_listed(page) == [str(november.pk)], "the last minute of November is November's"
    assert "3.60 USD</th>" in page, "the total of what is shown"
    page = partner_client.get(LEDGER, {"job": f"#{november.pk}"}).content.decode()
    assert _jobs_listed(page) == [str(november.pk)]
    page = partner_client.get(LEDGER, {"job": december.pk, "month": "2026-12", "page": "2"}).content.decode()
    assert len(_jobs_listed(page)) == 4
    assert f'href="?job={december.pk}&amp;month=2026-12&amp;page=1" rel="prev"' in page
    assert f'href="/billing/ledger.csv?job={december.pk}&amp;month=2026-12"' in page, "the export, as filtered"
    page = partner_client.get(LEDGER, {"month": "2026-10"}).content.decode()
    assert "No entry matches these filters." in page


def test_another_organisations_job_is_not_found(ledger, other_organisation, partner_client):
    theirs = make_job(other_organisation, "succeeded")
    entry(theirs, ended=DECEMBER)
    assert partner_client.get(LEDGER, {"job": theirs.pk}).status_code == 404
    assert partner_client.get("/billing/ledger.csv", {"job": theirs.pk}).status_code == 404
    assert str(theirs.pk) not in _jobs_listed(partner_client.get(LEDGER).content.decode())


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ({"month": "2026-13"}, "&#x27;2026-13&#x27; is not a month (YYYY-MM)"),
        ({"job": "abc"}, "&#x27;abc&#x27; is not a job number"),
        ({"job": "0"}, "&#x27;0&#x27; is not a job number"),
        ({"page": "abc"}, "There is no page &#x27;abc&#x27;"),
        ({"page": "-1"}, "There is no page &#x27;-1&#x27;"),
    ],
)
def test_a_filter_that_means_nothing_is_set_aside_on_the_page_and_refused_by_the_exports(
    ledger, partner_client, query, problem
):
    response = partner_client.get(LEDGER, query)
    assert response.status_code == 200
    page = response.content.decode()
    assert f'<p class="flash warning">{problem}; showing' in page
    assert len(_jobs_listed(page)) == 50
    if "page" in query:
        return
    exported = partner_client.get("/billing/ledger.csv", query)
    assert exported.status_code == 400 and exported.content.decode() == problem.replace("&#x27;", "'") + "."
    exported = partner_client.get("/billing/ledger.json", query)
    assert exported.status_code == 400 and exported.json() == {"error": problem.replace("&#x27;", "'") + "."}


def test_its_exports_stream_the_filtered_entries(ledger, partner_client):
    november, _ = ledger
    answer = partner_client.get("/billing/ledger.csv", {"month": "2026-11"})
    assert answer.streaming
    rows = list(csv.DictReader(io.StringIO(answer.getvalue().decode())))
    assert [row["job"] for row in rows[:-1]] == [str(november.pk)] and rows[-1]["kind"] == "head"
    answer = partner_client.get("/billing/ledger.json", {"month": "2026-12"})
    assert answer.streaming and len(json.loads(answer.getvalue())["entries"]) == 54


def test_its_queries_do_not_grow_with_the_ledger(ledger, partner, django_assert_max_num_queries):
    client = client_for(partner)
    with django_assert_max_num_queries(14):  # the session and user, the fleet (5), the totals, the count, the page
        client.get(LEDGER, {"page": "2"})
