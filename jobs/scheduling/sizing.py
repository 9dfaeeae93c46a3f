"""What a sample measured, and what it predicts for the full pass in each shape.

A sample runs the work over the first records of the staged data on one slot, shard after shard,
until E31_SAMPLE_SECONDS have gone. Its first shard pays for starting up (loading a model, say); the
shards after it show the steady speed. The full pass on G slots is then expected to take the start-up
plus records ÷ (G × records per second per slot); the hours asked for add a margin, since a request's
hours are its time limit and the meter only counts the hours held.
"""

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

import pyarrow.compute as pc
import pyarrow.parquet as pq
from django.conf import settings
from django.core.files.storage import default_storage

from jobs.billing_port import Rate, billing
from jobs.models import Job, Shard

MARGIN = 1.25  # the hours asked for, over the hours expected
HOURS_STEP = Decimal("0.25")
TOKENS = "output_tokens"  # the column of a generating work's output that counts what it generated


def measure(job: Job) -> dict:
    """A finished sample's figures: records and seconds of work, records per second per slot, the
    start-up, and the slot's peak memory; for a work that generates text, tokens generated per second
    per slot. Empty when no shard was done."""
    shards = list(job.shards.filter(status=Shard.Status.DONE).order_by("started_at", "index"))
    timed = [(shard.record_count, (shard.finished_at - shard.started_at).total_seconds()) for shard in shards]
    if not timed:
        return {}
    steady = timed[1:] or timed  # the first shard also started the work up
    steady_seconds = sum(seconds for _, seconds in steady)
    rate = sum(records for records, _ in steady) / steady_seconds if steady_seconds > 0 else None
    first_records, first_seconds = timed[0]
    startup = max(0.0, first_seconds - first_records / rate) if rate and len(timed) > 1 else 0.0
    memory = [shard.peak_memory_mb for shard in shards if shard.peak_memory_mb]
    device = shards[0].gpu.label if shards[0].gpu else None
    found = {}
    tokens = _tokens(shards[1:] or shards)
    if tokens is not None and steady_seconds > 0:
        found["tokens_per_second"] = round(tokens / steady_seconds, 3)
    return found | {
        "records": sum(records for records, _ in timed),
        "seconds": round(sum(seconds for _, seconds in timed), 3),
        "records_per_second": round(rate, 3) if rate else None,
        "startup_seconds": round(startup, 3),
        "peak_memory_mb": max(memory) if memory else None,
        "slot": device,
        "records_total": job.records_total,
    }


def _tokens(shards: list[Shard]) -> int | None:
    """The tokens the work generated in these shards, where its output counts them (generate's
    output_tokens); None for a work whose output does not."""
    total = 0
    for shard in shards:
        with default_storage.open(shard.output_path, "rb") as part:
            output = pq.ParquetFile(part)
            if TOKENS not in output.schema_arrow.names:
                return None
            total += pc.sum(output.read(columns=[TOKENS]).column(0)).as_py() or 0
    return total


@dataclass(frozen=True)
class Estimate:
    """The full pass on `gpus` slots, as the sample predicts it."""

    gpus: int
    seconds: float  # expected duration
    hours: Decimal  # to ask for: the expected duration with a margin, in quarter hours
    gpu_hours: Decimal  # expected to be held
    cost: Decimal | None  # at the rate in force now
    currency: str

    @property
    def duration(self) -> str:
        if self.seconds < 60:
            return f"{math.ceil(self.seconds)} s"
        minutes = math.ceil(self.seconds / 60)
        return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"

    def as_json(self) -> dict:
        """As the API and `submit` write it: decimals as exact strings."""
        return {
            "gpus": self.gpus,
            "seconds": round(self.seconds, 3),
            "duration": self.duration,
            "hours": str(self.hours),
            "gpu_hours": str(self.gpu_hours),
            "cost": None if self.cost is None else str(self.cost),
            "currency": self.currency,
        }


def estimate(result: dict, gpus: int, card: Rate | None = None) -> Estimate | None:
    """None when the sample measured no speed (it did no work)."""
    rate = result.get("records_per_second")
    if not rate or gpus < 1:
        return None
    seconds = result.get("startup_seconds", 0) + result["records_total"] / (gpus * rate)
    hours = (Decimal(seconds * MARGIN / 3600) / HOURS_STEP).to_integral_value(ROUND_CEILING) * HOURS_STEP
    gpu_hours = Decimal(gpus * seconds / 3600).quantize(Decimal("0.001"), ROUND_CEILING)
    card = card or billing().rate_in_force()
    cost = card.price(gpu_hours) if card else None
    return Estimate(gpus, seconds, max(hours, HOURS_STEP), gpu_hours, cost, card.currency if card else "USD")


def shapes(result: dict, online: int) -> list[Estimate]:
    """A wide shape (every online slot) and a narrow one (a quarter of them), when they differ."""
    card = billing().rate_in_force()
    counts = sorted({max(1, online), max(1, online // 4)}, reverse=True)
    return [found for gpus in counts if (found := estimate(result, gpus, card))]


def shard_records(job: Job) -> int | None:
    """Records per shard so that one takes about E31_SHARD_SECONDS, when the job's sample measured
    the work's speed; None without a sample."""
    rate = job.sample.sample_result.get("records_per_second") if job.sample_id else None
    if not rate:
        return None
    return max(1, math.floor(rate * settings.E31_SHARD_SECONDS))


def sample_hours() -> Decimal:
    """A sample's time limit: five times its budget, at least three minutes."""
    hours = Decimal(max(180, 5 * settings.E31_SAMPLE_SECONDS)) / 3600
    return hours.quantize(Decimal("0.01"), ROUND_CEILING)
