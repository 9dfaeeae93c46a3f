"""A job as its page, its live fragment, the submit command and the end-of-job email read it.

`JobFacts(job)` finds each fact in one place, once, and only when something reads it: the fragment
polled every two seconds computes no queue place for a running job. Build one per reading of a job; a
job read again (`refresh_from_db`) needs new facts. The facts other modules own are asked of them: the
meter of billing, the queue's figures of the scheduler (stored for the whole queue, so read in one
look), the due dates of retention, whose purges use them too.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from django.db.models import Count, Max, Q, QuerySet, Sum
from django.utils import timezone

from jobs import queue_figures, retention, scheduling
from jobs.billing_port import Charged, Meter, billing
from jobs.models import Gpu, Job, Shard, State
from jobs.queue_figures import QueueFigures
from jobs.scheduling import Fleet, sizing


@dataclass(frozen=True)
class Progress:
    records_total: int | None  # None while staging streams into the pass: known once it ends
    records_done: int
    shards_total: int
    shards_done: int
    records_per_second: float | None
    eta_seconds: float | None
    records_expected: int | None = None  # while staging streams into the pass: the records its size suggests

    @property
    def percent(self) -> int:
        total = self.records_total if self.records_total is not None else self.records_expected
        if not total:
            return 0
        return min(100, int(100 * self.records_done / total))


def _shard_totals(prefix: str = "") -> dict:
    """What a job's progress counts of its shards, each an aggregate named `prefix` + its name."""
    done = Q(**{f"{prefix}status__in": (Shard.Status.DONE, Shard.Status.FAILED)})  # a failed one of a partial output
    running = Q(**{f"{prefix}status": Shard.Status.RUNNING})
    counted = ~Q(**{f"{prefix}status": Shard.Status.SKIPPED})  # a sample's shards left when its time was up
    return {
        "shards_counted": Count(f"{prefix}pk", filter=counted),
        "shards_done": Count(f"{prefix}pk", filter=done),
        "records_finished": Sum(f"{prefix}record_count", filter=done),
        # Its claim's batches so far: a shard taken again starts from 0, so none is counted twice.
        "records_running": Sum(f"{prefix}records_done", filter=running),
        "records_counted": Sum(f"{prefix}record_count", filter=counted),
    }


class JobFacts:
    def __init__(self, job: Job):
        self.job = job

    @staticmethod
    def counting_shards(jobs: QuerySet) -> QuerySet:
        """These jobs with their shards counted as `progress` counts them, in the query that reads them."""
        return jobs.annotate(**_shard_totals("shards__"))

    @cached_property
    def progress(self) -> Progress:
        """Records and shards done, and the speed over the time held. A done shard counts all its records (kept
        and rejected), a running one the records its claim's batches have done so far."""
        job = self.job
        if hasattr(job, "shards_done"):  # read with the job (counting_shards)
            totals = {name: getattr(job, name) for name in _shard_totals()}
        else:
            totals = job.shards.aggregate(**_shard_totals())
        done = (totals["records_finished"] or 0) + (totals["records_running"] or 0)
        if job.kind == Job.Kind.PASS and job.streaming:  # the total is known once staging ends
            total, expected, records_done = None, job.layout.get("expected_records"), done
        else:
            total = (job.records_total if job.kind == Job.Kind.PASS else totals["records_counted"]) or 0
            expected, records_done = total, min(total, done)
        rate = eta = None
        if job.started_at and records_done:
            released = job.allocations.aggregate(Max("held_to"))["held_to__max"] if job.state != State.RUNNING else None
            # Held time only: a job held again after losing its nodes counts its earlier hold, not the queue between.
            elapsed = ((released or timezone.now()) - job.started_at + job.held_before).total_seconds()
            if elapsed > 0:
                rate = records_done / elapsed
                if job.state == State.RUNNING and expected:
                    eta = max(0, expected - records_done) / rate
        shards = (totals["shards_counted"], totals["shards_done"])
        return Progress(total, records_done, *shards, rate, eta, expected if total is None else None)

    @cached_property
    def has_finished_shards(self) -> bool:
        """A job that ended before its output keeps these, as a partial output."""
        return self.job.shards.filter(status=Shard.Status.DONE).exists()

    @cached_property
    def meter(self) -> Meter | None:
        if self.job.started_at is None:
            return None  # never held: nothing to read
        if self.job.state == State.RUNNING:  # no ledger entry before its hold ends: priced from the holds read here
            return billing().holds_meter(self.allocations)
        return billing().meter(self.job)

    @cached_property
    def charged(self) -> list[Charged]:
        """An ended job's cost per currency, every ledger entry counted: staging and corrections too."""
        return billing().charged(self.job) if self.job.ended else []

    @cached_property
    def noun(self) -> str:
        """What the job holds, or else what the fleet offers, in the product's words: "GPU" or "CPU slot".
        A running job's is read from its holds, which its page shows, not from the fleet."""
        kinds = {allocation.gpu.kind for allocation in self.allocations} if self.job.started_at else set()
        if kinds:
            return "CPU slot" if kinds == {Gpu.Kind.CPU} else "GPU"
        return scheduling.slot_noun()

    @cached_property
    def held_noun(self) -> str | None:
        return self.job.held_noun

    @cached_property
    def allocations(self) -> QuerySet:
        return self.job.allocations.select_related("gpu__node")

    @cached_property
    def events(self) -> QuerySet:
        return self.job.events.all()

    @cached_property
    def queue_figures(self) -> QueueFigures | None:
        """A queued job's place, the jobs on hold before it and its latest start, as the scheduler stored
        them; worked out for it alone when none are stored (queued since the last pass, Redis away)."""
        if self.job.state != State.QUEUED:
            return None
        return queue_figures.read(self.job) or scheduling.figures_of(self.job)

    @property
    def queue_position(self) -> int | None:
        return self.queue_figures.place if self.queue_figures else None

    @property
    def on_hold_ahead(self) -> int:
        return self.queue_figures.on_hold_ahead if self.queue_figures else 0

    @property
    def latest_start(self) -> datetime | None:
        return self.queue_figures.latest_start if self.queue_figures else None

    @cached_property
    def allocations_open(self) -> int:
        """How many slots it holds now."""
        return self.job.allocations.filter(held_to=None).count()

    @property
    def expected_start(self) -> datetime | None:
        """When it started; while it waits, the queue's figure when it has one, else what it was told at submit."""
        job = self.job
        if job.started_at or job.ended:
            return job.started_at
        return self.latest_start or job.expected_start

    @property
    def expected_finish(self) -> datetime | None:
        """When it ended; while it runs, by its rate so far (its time limit at the latest); while it waits,
        what it was told at submit, moved by as much as its start has moved since."""
        job = self.job
        if job.ended:
            return job.ended_at
        if job.state == State.RUNNING:
            limit = job.time_limit_at()
            eta = self.progress.eta_seconds
            if job.streaming and job.staging_eta is not None:
                eta = max(eta or 0.0, job.staging_eta)  # its last shards can start only once their bytes arrive
            by_rate = timezone.now() + timedelta(seconds=eta) if eta is not None else limit
            return min(by_rate, limit) if limit else by_rate
        if job.expected_finish and job.expected_start and self.latest_start:
            return job.expected_finish + (self.latest_start - job.expected_start)
        return job.expected_finish

    @cached_property
    def staging_mb_per_s(self) -> float | None:
        rate = self.job.staging_rate
        return rate / 1e6 if rate else None

    @cached_property
    def purge_due(self) -> datetime | None:
        return retention.purge_due_at(self.job)

    @cached_property
    def output_due(self) -> datetime | None:
        return retention.output_due_at(self.job)

    @cached_property
    def output_files(self) -> list[str]:
        return self.job.output_names

    @cached_property
    def copy_taken_by(self) -> Job | None:
        """The full pass that took a sample's staged copy over: its retention governs the copy now."""
        job = self.job
        if job.kind != Job.Kind.SAMPLE or job.staged_path or job.staged_purged_at or job.input_bytes is None:
            return None
        return job.passes.exclude(input_bytes=None).order_by("pk").first()

    @cached_property
    def fleet(self) -> Fleet:
        """The fleet now: a sample's estimates are sized on the slots online."""
        return scheduling.fleet()

    @cached_property
    def measured(self) -> bool:
        """A sample that measured the work's speed: it sizes a full pass."""
        return self.job.kind == Job.Kind.SAMPLE and bool(self.job.sample_result.get("records_per_second"))

    @cached_property
    def shapes(self) -> list[sizing.Estimate]:
        """The full pass in each shape, on the slots online now."""
        return sizing.shapes(self.job.sample_result, self.fleet.online) if self.measured else []

    @cached_property
    def planned_pass(self) -> sizing.Estimate | None:
        """The full pass on the GPUs asked for with the sample, no more than are online."""
        asked = int(self.job.sample_result.get("request", {}).get("gpus", 1))
        return self.estimate(max(1, min(asked, self.fleet.online)))

    def estimate(self, gpus: int) -> sizing.Estimate | None:
        """The full pass on `gpus` slots, as the sample predicts it."""
        return sizing.estimate(self.job.sample_result, gpus)
