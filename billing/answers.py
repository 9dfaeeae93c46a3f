"""Billing's answers to what the engine asks of it (jobs/billing_port.py), registered when Django starts
(billing/apps.py): jobs reads the rate, the retention limits, the meter and the ledger through them without
importing billing."""

from collections.abc import Iterable
from decimal import Decimal

from django.db.models import F, Sum
from django.utils import timezone

from billing import metering
from billing.anchor import head_of
from billing.metering import Charged, Meter, ledger_row
from billing.models import LedgerEntry, RateCard, RetentionPolicy
from jobs.models import ENDED, Allocation, Job
from portal.models import Organisation


def rate_in_force() -> RateCard | None:
    return RateCard.in_force()


def retention_limits(organisation: Organisation) -> RetentionPolicy:
    return RetentionPolicy.in_force(organisation)


def meter(job: Job) -> Meter | None:
    return metering.meter_for(job)


def holds_meter(allocations: Iterable[Allocation]) -> Meter | None:
    return metering.holds_meter(allocations)


def charged(job: Job) -> list[Charged]:
    return metering.charged(job)


def ledger_lines(job: Job) -> list[dict]:
    """Every entry of the job, in the order the ledger holds them, each with its hash in the chain."""
    return [ledger_row(entry) for entry in LedgerEntry.objects.filter(job=job).order_by("created", "pk")]


def hold_line(job: Job) -> dict:
    return ledger_row(LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.HOLD))


def ledger_head(organisation: Organisation) -> dict:
    """The organisation's whole ledger as it stands now, sealed."""
    return head_of(organisation).as_json()


def month_committed(organisation: Organisation) -> Decimal:
    """What the organisation was charged this calendar month (UTC), and the budgets (GPUs × hours at the
    rate in force) of its jobs not yet ended, which the ledger has not seen: its spend, counted against a
    monthly cap."""
    start = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    charged = LedgerEntry.objects.filter(organisation=organisation, held_to__gte=start).aggregate(total=Sum("amount"))
    open_jobs = Job.objects.filter(organisation=organisation).exclude(state__in=ENDED)
    budgets = open_jobs.aggregate(total=Sum(F("gpus") * F("hours")))["total"] or Decimal(0)
    card = RateCard.in_force()
    return (charged["total"] or Decimal(0)) + (card.price(Decimal(budgets)) if card else Decimal(0))
