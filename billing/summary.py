"""The ledger as its page reads it. By month: per month (when each entry ended, UTC) and currency, the jobs
billed, the GPU-hours held, the bytes staged and the amount; and the amounts as a bar chart, an SVG the page
draws without a script or a chart library (its colours are the stylesheet's, so it follows dark mode). By job:
a row per job for what it was charged, its entries at no charge (a staging the rate card does not price)
folded under it. The exports list every entry as it is (billing/exports.py)."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.db.models import Count, Max, Q, QuerySet, Sum
from django.db.models.functions import TruncMonth
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from billing.models import LedgerEntry
from portal import units

CHART_MONTHS = 12
WIDTH, HEIGHT, LABELS = 640, 170, 44  # the chart's box, and the room under the bars for their month and year


@dataclass(frozen=True)
class Month:
    start: datetime
    currency: str
    jobs: int
    gpu_hours: Decimal
    bytes_staged: int
    amount: Decimal


def by_month(entries: QuerySet) -> list[Month]:
    """The entries added up per month and currency, newest month first (amounts add up within a currency)."""
    rows = (
        entries.order_by()
        .annotate(month=TruncMonth("held_to", tzinfo=UTC))
        .values("month", "currency")
        .annotate(
            jobs=Count("job", distinct=True),
            gpu_hours=Sum("gpu_hours"),
            staged=Sum("bytes", filter=Q(kind=LedgerEntry.Kind.STAGING)),
            amount=Sum("amount"),
        )
        .order_by("-month", "currency")
    )
    return [
        Month(row["month"], row["currency"], row["jobs"], row["gpu_hours"], row["staged"] or 0, row["amount"])
        for row in rows
    ]


@dataclass(frozen=True)
class JobLines:
    """A job's entries as the ledger page shows them: a row for each that charged something (a correction
    always, for its reason), and those at no charge folded under the first. A job charged nothing still has a
    row: its first entry."""

    job_id: int
    entries: tuple[LedgerEntry, ...]  # in the order they were written

    @property
    def rows(self) -> list[LedgerEntry]:
        charged = [entry for entry in self.entries if _charged(entry)]
        return charged or [self.entries[0]]

    @property
    def folded(self) -> list[LedgerEntry]:
        rows = self.rows
        return [entry for entry in self.entries if entry not in rows]


def _charged(entry: LedgerEntry) -> bool:
    return entry.amount != 0 or entry.kind == LedgerEntry.Kind.CORRECTION


def jobs_newest_first(entries: QuerySet) -> QuerySet:
    """The jobs these entries are of, the one with the latest entry first: what the ledger page pages through,
    so that a job's entries are never split between two pages."""
    jobs = entries.order_by().values("job").annotate(last=Max("held_to"), last_pk=Max("pk"))
    return jobs.order_by("-last", "-last_pk")


def by_job(entries: QuerySet, jobs: list[int]) -> list[JobLines]:
    """The entries of these jobs (those `entries` keeps), a JobLines each, in the order of `jobs`."""
    found: dict[int, list[LedgerEntry]] = {job: [] for job in jobs}
    for entry in entries.filter(job__in=jobs).order_by("held_to", "pk"):
        found[entry.job_id].append(entry)
    return [JobLines(job, tuple(lines)) for job, lines in found.items() if lines]


def bar_chart(months: list[Month]) -> SafeString:
    """The last CHART_MONTHS months' amounts in the currency most of them bill in, oldest on the left, as an
    SVG with a title and a label per bar (a screen reader reads the table beside it); empty without months."""
    if not months:
        return SafeString("")
    currency = max({m.currency for m in months}, key=lambda c: sum(m.currency == c for m in months))
    shown = sorted((m for m in months if m.currency == currency), key=lambda m: m.start)[-CHART_MONTHS:]
    top = max((m.amount for m in shown), default=Decimal(0)) or Decimal(1)
    slot = WIDTH / len(shown)
    bars = []
    for index, month in enumerate(shown):
        tall = float(month.amount / top) * (HEIGHT - LABELS - 14) if month.amount > 0 else 0
        x = index * slot + slot * 0.15
        bars.append(
            (
                f"{x:.1f}",
                f"{HEIGHT - LABELS - tall:.1f}",
                f"{slot * 0.7:.1f}",
                f"{tall:.1f}",
                f"{month.start:%Y-%m}: {units.money(month.amount, currency)}",
                f"{x + slot * 0.35:.1f}",
                f"{HEIGHT - LABELS + 14}",
                f"{month.start:%b}",
                f"{HEIGHT - LABELS - tall - 4:.1f}",
                f"{units.hundredths(month.amount)}",
                f"{month.start:%Y}",
            )
        )
    drawn = format_html_join(
        "",
        '<g><title>{4}</title><rect x="{0}" y="{1}" width="{2}" height="{3}" rx="2"></rect>'
        '<text x="{5}" y="{6}" class="label">{7}<tspan x="{5}" dy="1.2em">{10}</tspan></text>'
        '<text x="{5}" y="{8}" class="value">{9}</text></g>',
        bars,
    )
    return format_html(
        '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}"><line x1="0" y1="{}" x2="{}" y2="{}">'
        "</line>{}</svg>",
        WIDTH,
        HEIGHT,
        f"Amount billed per month, in {currency}",
        HEIGHT - LABELS,
        WIDTH,
        HEIGHT - LABELS,
        drawn,
    )
