"""The ledger page: a page of jobs at a time, the newest first, each a row for what it was charged with its
entries at no charge folded under it, filtered by the month they ended in and by job, with the totals of every
entry the filters keep; its exports stream the same entries, every one of them."""

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.metering import ledger_row, record_staging
from billing.models import LedgerEntry, RateCard
from jobs.models import Job
from tests.api.support import entry
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db

LEDGER = "/billing/ledger/"
DECEMBER = datetime(2026, 12, 1, tzinfo=UTC)


def _jobs_listed(page: str) -> list[str]:
    return [cell.split("/")[0] for cell in page.split('<td><a href="/jobs/')[1:]]


def _groups(page: str) -> dict[str, str]:
    """Each job's rows on the page, by its number."""
    groups = re.findall(r'<tbody class="job">(.*?)</tbody>', page, re.S)
    return {re.search(r'<a href="/jobs/(\d+)/">', group)[1]: group for group in groups}


def _rows(group: str) -> list[str]:
    """A job's rows of its own: not the one its entries at no charge are folded in."""
    return re.findall(r"<tr>(.*?)</tr>", group, re.S)


def staged(job, ended: datetime) -> LedgerEntry:
    """Its staging's entry, as the meter writes it: at no charge unless the rate card prices a GB."""
    return record_staging(Job, job=job, size=12_500_000, started=ended - timedelta(seconds=16), finished=ended)


@pytest.fixture
def ledger(organisation):
    """A job staged and held in November; 54 jobs staged and held in December, one a minute from 1 December, the
    first of them credited a while later."""
    november = make_job(organisation, "succeeded")
    staged(november, DECEMBER - timedelta(hours=2))
    entry(november, ended=DECEMBER - timedelta(minutes=1))
    december = [make_job(organisation, "succeeded") for _ in range(54)]
    for minute, job in enumerate(december):
        staged(job, DECEMBER + timedelta(minutes=minute, seconds=1))
        entry(job, ended=DECEMBER + timedelta(minutes=minute, seconds=30))
    entry(december[0], ended=DECEMBER + timedelta(hours=2), kind=LedgerEntry.Kind.CORRECTION, amount="-1")
    return november, december


def test_it_pages_the_jobs_newest_first_with_the_totals_of_all(ledger, partner_client):
    november, december = ledger
    first = partner_client.get(LEDGER).content.decode()
    newest_first = [str(december[0].pk)] + [str(job.pk) for job in reversed(december[1:])]
    assert _jobs_listed(first) == newest_first[:50], "the credited job by its credit, the latest entry"
    assert "Page 1 of 2 · 1–50 of 55 jobs" in first
    assert "Total of all 111 entries" in first and "197.00 USD" in first, "55 × 3.6 less the credit, not the page's"
    last = partner_client.get(LEDGER, {"page": "2"}).content.decode()
    assert _jobs_listed(last) == [*newest_first[50:], str(november.pk)]


def test_a_jobs_entries_at_no_charge_are_folded_under_its_row(ledger, organisation, partner_client):
    _, december = ledger
    cancelled = make_job(organisation, "cancelled")
    staged(cancelled, DECEMBER + timedelta(days=1))
    groups = _groups(partner_client.get(LEDGER).content.decode())

    held = groups[str(december[-1].pk)]
    assert len(_rows(held)) == 1 and "3.60 USD" in _rows(held)[0] and "GPU hold" in _rows(held)[0]
    folded = re.search(r'<tr class="folded">.*?<details class="folded">(.*?)</details>', held, re.S)[1]
    assert "staging: no charge" in folded and "Staging of 12.5\xa0MB (upload)" in folded and "0.00 USD" in folded
    assert held.index("<tr>") < held.index('<tr class="folded">'), "under its row"

    credited = groups[str(december[0].pk)]
    rows = _rows(credited)
    assert len(rows) == 2 and "3.60 USD" in rows[0] and "Correction: a test&#x27;s correction" in rows[1]
    assert rows[1].startswith("\n      <td></td>"), "the job named once, on its first row"
    assert "staging: no charge" in credited

    nothing_charged = groups[str(cancelled.pk)]
    assert len(_rows(nothing_charged)) == 1 and "Staging (Upload)" in nothing_charged
    assert "<details" not in nothing_charged, "its one entry is its row"


def test_a_staging_the_rate_card_prices_is_a_row_of_its_own(organisation, partner_client):
    RateCard.objects.create(rate_per_gpu_hour=Decimal("3.6"), rate_per_staged_gb=Decimal("0.8"),
                            effective_from=DECEMBER - timedelta(days=1))  # fmt: skip
    job = make_job(organisation, "succeeded")
    staged(job, DECEMBER)
    entry(job, ended=DECEMBER + timedelta(hours=1))
    group = _groups(partner_client.get(LEDGER).content.decode())[str(job.pk)]
    rows = _rows(group)
    assert len(rows) == 2 and "0.01 USD" in rows[0] and "3.60 USD" in rows[1]
    assert "<details" not in group


def test_its_exports_keep_every_entry_those_at_no_charge_too(ledger, partner_client):
    written = LedgerEntry.objects.order_by("-held_to", "-pk")
    assert written.filter(amount=0).count() == 55
    exported = list(csv.DictReader(io.StringIO(partner_client.get("/billing/ledger.csv").getvalue().decode())))
    assert exported[:-1] == [
        {name: "" if value is None else str(value) for name, value in ledger_row(entry).items()} for entry in written
    ]
    assert json.loads(partner_client.get("/billing/ledger.json").getvalue())["entries"] == [
        json.loads(json.dumps(ledger_row(entry))) for entry in written
    ]


def test_it_filters_by_month_and_job(ledger, partner_client):
    november, december = ledger
    page = partner_client.get(LEDGER, {"month": "2026-11"}).content.decode()
    assert _jobs_listed(page) == [str(november.pk)], "the last minute of November is November's"
    assert "3.60 USD</th>" in page, "the total of what is shown"
    page = partner_client.get(LEDGER, {"job": f"#{november.pk}"}).content.decode()
    assert _jobs_listed(page) == [str(november.pk)]
    page = partner_client.get(LEDGER, {"job": december[0].pk, "month": "2026-12"}).content.decode()
    assert _jobs_listed(page) == [str(december[0].pk)] and "2.60 USD</th>" in page
    assert f'href="/billing/ledger.csv?job={december[0].pk}&amp;month=2026-12"' in page, "the export, as filtered"
    page = partner_client.get(LEDGER, {"month": "2026-12", "page": "2"}).content.decode()
    assert len(_jobs_listed(page)) == 4
    assert 'href="?month=2026-12&amp;page=1" rel="prev"' in page
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
    assert [row["job"] for row in rows[:-1]] == [str(november.pk)] * 2 and rows[-1]["kind"] == "head"
    answer = partner_client.get("/billing/ledger.json", {"month": "2026-12"})
    assert answer.streaming and len(json.loads(answer.getvalue())["entries"]) == 54 * 2 + 1


def test_its_queries_do_not_grow_with_the_ledger(ledger, partner, django_assert_max_num_queries):
    client = client_for(partner)
    # The session and user, the fleet (5), the totals, the count, the page's jobs and their entries.
    with django_assert_max_num_queries(15):
        client.get(LEDGER, {"page": "2"})
