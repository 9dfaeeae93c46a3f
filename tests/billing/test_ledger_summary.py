"""The ledger by month: jobs, GPU-hours, bytes staged and the amount per month and currency, and its chart."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.models import LedgerEntry
from billing.summary import CHART_MONTHS, bar_chart, by_month
from tests.api.support import entry
from tests.factories import make_job

pytestmark = pytest.mark.django_db

DECEMBER = datetime(2026, 12, 1, tzinfo=UTC)


def staging(job, ended: datetime, size: int) -> LedgerEntry:
    written, _ = LedgerEntry.objects.append(
        organisation=job.organisation, job=job, kind=LedgerEntry.Kind.STAGING, gpus=0, held_from=ended,
        held_to=ended, seconds=1, bytes=size, source_kind="upload", gpu_hours=Decimal(0), rate=Decimal("0.02"),
        currency="USD", amount=Decimal("0.0200"),
    )  # fmt: skip
    return written


def test_it_adds_up_each_month_by_when_its_entries_ended(organisation):
    one, two, three = (make_job(organisation, "succeeded") for _ in range(3))
    staging(one, DECEMBER - timedelta(hours=2), 10**9)
    entry(one, ended=DECEMBER - timedelta(seconds=1))  # the last second of November
    entry(two, ended=DECEMBER)
    entry(two, ended=DECEMBER + timedelta(days=3), kind=LedgerEntry.Kind.CORRECTION, amount="-1.6")
    entry(three, ended=DECEMBER + timedelta(days=4))
    december, november = by_month(LedgerEntry.objects.filter(organisation=organisation))
    assert (november.start, november.jobs, november.bytes_staged) == (datetime(2026, 11, 1, tzinfo=UTC), 1, 10**9)
    assert (november.gpu_hours, november.amount) == (Decimal("1"), Decimal("3.62"))
    assert (december.start, december.jobs, december.bytes_staged) == (DECEMBER, 2, 0)
    assert (december.gpu_hours, december.amount) == (Decimal("3"), Decimal("5.6")), "a credit counts against it"


def test_amounts_in_two_currencies_are_two_rows(organisation):
    job = make_job(organisation, "succeeded")
    entry(job, ended=DECEMBER)
    euro = make_job(organisation, "succeeded")
    LedgerEntry.objects.append(
        organisation=organisation, job=euro, kind=LedgerEntry.Kind.HOLD, gpus=1, held_from=DECEMBER,
        held_to=DECEMBER + timedelta(hours=1), seconds=3600, gpu_hours=Decimal(1), rate=Decimal(2), currency="EUR",
        amount=Decimal(2),
    )  # fmt: skip
    rows = by_month(LedgerEntry.objects.filter(organisation=organisation))
    assert [(row.currency, row.amount) for row in rows] == [("EUR", Decimal(2)), ("USD", Decimal("3.6"))]


def test_the_chart_draws_the_last_twelve_months_oldest_first(organisation):
    jobs = [make_job(organisation, "succeeded") for _ in range(14)]
    for months_back, job in enumerate(jobs):
        year, month = divmod(2026 * 12 + 11 - months_back, 12)
        ended = datetime(year, month + 1, 15, tzinfo=UTC)
        entry(job, ended=ended, amount=str(months_back + 1))
    svg = str(bar_chart(by_month(LedgerEntry.objects.filter(organisation=organisation))))
    assert svg.startswith('<svg class="chart"') and 'aria-label="Amount billed per month, in USD"' in svg
    assert svg.count("<rect") == CHART_MONTHS
    assert svg.index("<title>2026-01: 12.00 USD</title>") < svg.index("<title>2026-12: 1.00 USD</title>")
    assert "2025-12" not in svg, "the thirteenth month back is left out"


def test_a_month_of_credit_draws_no_bar_below_the_line(organisation):
    job = make_job(organisation, "succeeded")
    entry(job, ended=DECEMBER, kind=LedgerEntry.Kind.CORRECTION, amount="-2")
    svg = str(bar_chart(by_month(LedgerEntry.objects.filter(organisation=organisation))))
    assert 'height="0.0"' in svg and "<title>2026-12: -2.00 USD</title>" in svg


def test_no_entries_no_chart():
    assert bar_chart([]) == ""


def test_the_ledger_page_shows_the_months_with_their_chart(organisation, partner_client):
    job = make_job(organisation, "succeeded")
    entry(job, ended=DECEMBER + timedelta(days=1))
    page = partner_client.get("/billing/ledger/").content.decode()
    assert "<h2>By month</h2>" in page and '<svg class="chart"' in page
    assert '<td>December 2026</td><td class="num">1</td><td class="num wide-only">1.00</td>' in page
    assert "3.60 USD</td></tr>" in page
    filtered = partner_client.get("/billing/ledger/", {"month": "2026-11"}).content.decode()
    assert "By month" not in filtered, "no entry in November: no months"


def test_the_chart_names_each_month_with_its_year_and_reads_amounts_to_the_ledger_s_precision(organisation):
    job = make_job(organisation, "succeeded")
    entry(job, ended=DECEMBER, amount="0.0021")
    svg = str(bar_chart(by_month(LedgerEntry.objects.filter(organisation=organisation))))
    assert '>Dec<tspan x="320.0" dy="1.2em">2026</tspan></text>' in svg, "not “Dec 26”, which reads as a day"
    assert 'class="value">&lt; 0.01</text>' in svg, "a small amount does not read 0.00"
