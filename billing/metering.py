"""The meter: turns a released hold (and a finished staging) into a ledger entry, prices a hold
still running, and records an operator's correction as an entry of its own."""

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Sum
from django.dispatch import receiver
from django.utils import timezone

from billing.models import MONEY, LedgerEntry, RateCard
from jobs.models import hold_periods
from jobs.signals import hold_released, staging_finished

log = logging.getLogger(__name__)

GPU_HOURS = Decimal("0.000001")


@dataclass(frozen=True)
class Meter:
    gpus: int
    seconds: int
    gpu_hours: Decimal
    rate: Decimal
    currency: str
    amount: Decimal


def price(gpus: int, held_from: datetime, held_to: datetime) -> Meter:
    """GPUs × hours held × the rate in force when the hold started, counted per started second."""
    return price_holds(gpus, [(held_from, held_to)] * gpus)


def price_holds(gpus: int, holds: Sequence[tuple[datetime, datetime]]) -> Meter:
    """The seconds of each GPU's hold (held_from to held_to, per started second) added up, at the rate
    in force when the first hold started: a GPU released early (its node went offline) counts only
    until then. `seconds` is how long the job held any GPU: from each hold's start (its GPUs share it)
    to the last of them released, added up, so a job queued again between two holds does not count
    the queue."""
    if not holds:
        raise ValueError("a meter needs at least one hold")
    held_from = min(start for start, _ in holds)
    gpu_seconds = sum(_started_seconds(start, end) for start, end in holds)
    card = RateCard.in_force(held_from)
    rate = card.rate_per_gpu_hour if card else Decimal(0)
    gpu_hours = (Decimal(gpu_seconds) / 3600).quantize(GPU_HOURS)
    return Meter(
        gpus=gpus,
        seconds=sum(_started_seconds(start, end) for start, end in hold_periods(holds)),
        gpu_hours=gpu_hours,
        rate=rate,
        currency=card.currency if card else "USD",
        amount=(gpu_hours * rate).quantize(MONEY),
    )


def _started_seconds(start: datetime, end: datetime) -> int:
    return max(0, math.ceil((end - start).total_seconds()))


def meter_for(job) -> Meter | None:
    """What a job's hold has cost so far: the ledger entry once released, the running meter before
    (the holds still open counted until now)."""
    entry = LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD).first()
    if entry:
        return Meter(entry.gpus, entry.seconds, entry.gpu_hours, entry.rate, entry.currency, entry.amount)
    return holds_meter(job.allocations.all())


@dataclass(frozen=True)
class Charged:
    """What a job was charged in one currency: its ledger entries added up, and by kind."""

    currency: str
    amount: Decimal
    by_kind: dict[str, Decimal]

    @property
    def parts(self) -> list[tuple[str, Decimal]]:
        """(kind's label, amount) of each kind charged, when more than the hold was: what the total is made of."""
        kinds = LedgerEntry.Kind
        parts = [(kind.label, self.by_kind[kind]) for kind in kinds if self.by_kind.get(kind)]
        return parts if len(parts) > 1 or LedgerEntry.Kind.HOLD not in self.by_kind else []


def charged(job) -> list[Charged]:
    """Every ledger entry of the job (its hold, its staging, the operators' corrections) added up per
    currency, as its receipt adds them: what the job cost in the end."""
    sums: dict[str, dict[str, Decimal]] = {}
    totals = LedgerEntry.objects.filter(job=job).values("currency", "kind").annotate(total=Sum("amount"))
    for row in totals.order_by("currency"):
        sums.setdefault(row["currency"], {})[row["kind"]] = row["total"]
    return [Charged(currency, sum(kinds.values(), Decimal(0)), kinds) for currency, kinds in sums.items()]


def holds_meter(allocations: Iterable) -> Meter | None:
    """What these holds of one job have cost so far, those still open counted until now; None for none."""
    allocations = list(allocations)
    if not allocations:
        return None
    now = timezone.now()
    holds = [(a.held_from, a.held_to or now) for a in allocations]
    return price_holds(len({a.gpu_id for a in allocations}), holds)


@receiver(hold_released)
def record_hold(sender, job, gpus: int, holds: list[tuple[datetime, datetime]], **kwargs) -> LedgerEntry:
    """The job's one hold entry: every GPU it held, each for its own time (GPU-seconds added up)."""
    meter = price_holds(gpus, holds)
    held_from = min(start for start, _ in holds)
    entry, created = LedgerEntry.objects.append(
        organisation_id=job.organisation_id,
        job=job,
        kind=LedgerEntry.Kind.HOLD,
        gpus=gpus,
        held_from=held_from,
        held_to=max(end for _, end in holds),
        seconds=meter.seconds,
        gpu_hours=meter.gpu_hours,
        rate=meter.rate,
        currency=meter.currency,
        amount=meter.amount,
    )
    if created and RateCard.in_force(held_from) is None:
        log.warning("job %s: no rate card was in force when its hold started; it is recorded at 0", job.pk)
    return entry


@receiver(staging_finished)
def record_staging(sender, job, size: int, started: datetime, finished: datetime, **kwargs) -> LedgerEntry:
    """Staging holds no GPU; its entry records what it moved and took, charged only at a per-GB rate."""
    card = RateCard.in_force(started)
    rate = card.rate_per_staged_gb if card else Decimal(0)
    entry, _ = LedgerEntry.objects.append(
        organisation_id=job.organisation_id,
        job=job,
        kind=LedgerEntry.Kind.STAGING,
        gpus=0,
        held_from=started,
        held_to=finished,
        seconds=max(0, math.ceil((finished - started).total_seconds())),
        gpu_hours=Decimal(0),
        bytes=size,
        source_kind=job.source_kind,
        rate=rate,
        currency=card.currency if card else "USD",
        amount=(Decimal(size) / 10**9 * rate).quantize(MONEY),
    )
    return entry


def record_correction(job, amount: Decimal, currency: str, reason: str, by) -> LedgerEntry:
    """An operator's correction of what a job was charged: a new entry with its reason, never an edit
    of one. A negative amount is a credit (a refund); a job's total in a currency never goes below 0."""
    reason, currency = reason.strip(), currency.strip().upper()
    if not reason:
        raise ValidationError({"reason": "Say why: the reason is kept on the ledger and the receipt."})
    if amount == 0:
        raise ValidationError({"amount": "A correction of 0 changes nothing."})
    with transaction.atomic():
        LedgerEntry.objects.lock_chain(job.organisation_id)
        charged = job.ledger_entries.filter(currency=currency).aggregate(total=Sum("amount"))["total"]
        if charged is None:
            currencies = sorted(set(job.ledger_entries.values_list("currency", flat=True)))
            held = f"only in {', '.join(currencies)}" if currencies else "nothing yet"
            raise ValidationError({"currency": f"Job #{job.pk} was charged {held}, not in {currency}."})
        if charged + amount < 0:
            most = f"{charged.quantize(MONEY)} {currency}"
            raise ValidationError(
                {"amount": f"A credit of at most {most}: what job #{job.pk} was charged, less credits."}
            )
        now = timezone.now()
        entry, _ = LedgerEntry.objects.append(
            organisation_id=job.organisation_id,
            job=job,
            kind=LedgerEntry.Kind.CORRECTION,
            gpus=0,
            held_from=now,
            held_to=now,
            seconds=0,
            gpu_hours=Decimal(0),
            rate=Decimal(0),
            currency=currency,
            amount=amount,
            reason=reason,
            recorded_by=by.get_username(),
        )
    log.info("job %s: %s %s %s by %s: %s", job.pk, "credit" if amount < 0 else "charge", amount, currency, by, reason)
    return entry


def ledger_row(entry: LedgerEntry) -> dict:
    """A ledger entry as the exports and the CLI give it, with its hash and the one it is chained to."""
    return {
        "job": entry.job_id,
        "kind": entry.kind,
        "gpus": entry.gpus,
        "held_from": entry.held_from.isoformat(),
        "held_to": entry.held_to.isoformat(),
        "seconds": entry.seconds,
        "gpu_hours": str(entry.gpu_hours),
        "bytes": entry.bytes,
        "source": entry.source_kind,
        "rate": str(entry.rate),
        "currency": entry.currency,
        "amount": str(entry.amount),
        "reason": entry.reason,
        "hash": entry.hash,
        "previous_hash": entry.previous_hash,
    }
