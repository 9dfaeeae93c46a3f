"""The meter: turns a released hold (and a finished staging) into a ledger entry, and prices a hold
still running."""

import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.dispatch import receiver
from django.utils import timezone

from billing.models import LedgerEntry, RateCard
from jobs.signals import hold_released, staging_finished

GPU_HOURS = Decimal("0.000001")
MONEY = Decimal("0.0001")


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
    seconds = max(0, math.ceil((held_to - held_from).total_seconds()))
    card = RateCard.in_force(held_from)
    rate = card.rate_per_gpu_hour if card else Decimal(0)
    gpu_hours = (Decimal(gpus * seconds) / 3600).quantize(GPU_HOURS)
    return Meter(
        gpus=gpus,
        seconds=seconds,
        gpu_hours=gpu_hours,
        rate=rate,
        currency=card.currency if card else "USD",
        amount=(gpu_hours * rate).quantize(MONEY),
    )


def meter_for(job) -> Meter | None:
    """What a job's hold has cost so far: the ledger entry once released, the running meter before."""
    entry = LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD).first()
    if entry:
        return Meter(entry.gpus, entry.seconds, entry.gpu_hours, entry.rate, entry.currency, entry.amount)
    held = [a.held_from for a in job.allocations.all() if a.held_to is None]
    if not held:
        return None
    return price(len(held), min(held), timezone.now())


@receiver(hold_released)
def record_hold(sender, job, gpus: int, held_from: datetime, held_to: datetime, **kwargs) -> LedgerEntry:
    meter = price(gpus, held_from, held_to)
    entry, _ = LedgerEntry.objects.get_or_create(
        job=job,
        kind=LedgerEntry.Kind.HOLD,
        defaults={
            "organisation_id": job.organisation_id,
            "gpus": gpus,
            "held_from": held_from,
            "held_to": held_to,
            "seconds": meter.seconds,
            "gpu_hours": meter.gpu_hours,
            "rate": meter.rate,
            "currency": meter.currency,
            "amount": meter.amount,
        },
    )
    return entry


@receiver(staging_finished)
def record_staging(sender, job, size: int, started: datetime, finished: datetime, **kwargs) -> LedgerEntry:
    """Staging holds no GPU; its entry records what it moved and took, charged only at a per-GB rate."""
    card = RateCard.in_force(started)
    rate = card.rate_per_staged_gb if card else Decimal(0)
    entry, _ = LedgerEntry.objects.get_or_create(
        job=job,
        kind=LedgerEntry.Kind.STAGING,
        defaults={
            "organisation_id": job.organisation_id,
            "gpus": 0,
            "held_from": started,
            "held_to": finished,
            "seconds": max(0, math.ceil((finished - started).total_seconds())),
            "gpu_hours": Decimal(0),
            "bytes": size,
            "source_kind": job.source_kind,
            "rate": rate,
            "currency": card.currency if card else "USD",
            "amount": (Decimal(size) / 10**9 * rate).quantize(MONEY),
        },
    )
    return entry
