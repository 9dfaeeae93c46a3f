"""Replay a job trace through the real scheduler, lifecycle and shard claims, in simulated time (issue 31).

    .venv/bin/python bench/replay.py --trace bench/traces/philly_like.csv --gpus 64 [--nodes K]
        [--compress C] [--policy default|fifo] [--seed S] [--warmup S]

The trace is a CSV of `submit_time,num_gpu,duration` (seconds; a job's true duration at its num_gpu),
and optionally `job_id`, `ddl` (an absolute deadline in the trace's seconds; empty: none), `org`,
`fixed` and `max_gpu`. `--compress C` divides arrival times by C and keeps each deadline's slack.

It runs on a scratch var/ of its own (bench/scratch.py: SQLite, the embedded Redis), with `--gpus` slots
on `--nodes` nodes (default: 8 a node), and nothing waits on the wall clock: the clock the portal reads
(datetime's and time's, through time-machine) is frozen and moved from event to event, in this process
only. No Celery worker runs; the tasks the code sends are caught as they would leave after commit:
- `jobs.tasks.schedule` runs here, by name, as the control worker runs it (`--policy default`), or
  `fifo_pass` below runs (`--policy fifo`); the nodes beat just before;
- `jobs.tasks.run_slot` makes the slot work its hold as `jobs.workers.runner.run_slot` does: after
  `--warmup` seconds (a slot's start on a job, billed), it claims shards with `runner.claim_next`, each
  done after its records at one record a second, marked done under its claim as the runner marks it,
  and the slot that finds none left calls `lifecycle.finish_pass`;
- `jobs.tasks.assemble` is taken as instant: a finishing job succeeds (`lifecycle.succeed`);
- beat's `jobs.tasks.enforce_time_limits` runs at each running job's time limit and each deadline;
- the rest (emails, purges) are dropped.
A job arrives as a row with its shards, staged at once (`lifecycle.begin_staging`, `lifecycle.queue`).
What the scheduler is told is the request: the duration × a factor drawn from [1, 2] (`--seed`), never
the true duration. A job's shards are max(30 s, its GPU-seconds / 200) of work. A job is a flexible
request with a width cap of `max_gpu` (else 8 × `num_gpu`) unless `fixed` is 1 (`--policy fifo`: all
fixed, as before flexible requests). A slot asked back (or left with no shard to take) gives its hold
back at its shard boundary with `lifecycle.give_back`, as the runner does. A job with a deadline is told
at submit whether it can meet it (`scheduling.outlook`, as the portal tells it); one that cannot is
submitted anyway, as best effort. A shard's lease is set past the longest shard, as the slot's lease
keeper would renew it.

Its last line is one JSON object: `deadlines_met` (jobs with a deadline that succeeded by it ÷ jobs with
a deadline; null without), `deadlines_told_infeasible` (how many were told at submit that theirs could not be
met, and ran as best effort), `deadlines_missed_not_told` (how many missed one they were not told of: the
protection failing), `jct_mean_h` (submit to end, jobs without a deadline), `wait_mean_h` and
`wait_p95_h` (submit to the first hold, or to the end for a job never held), `utilisation` (slot-seconds
spent on shards ÷ the slots × first submit to last end), `idle_share_while_waiting` (∫ min(free slots,
slots asked for by queued jobs) dt over the same), `max_org_slowdown` (the organisation whose jobs'
mean of time in the system ÷ true duration is highest; null without an `org` column), `org_jct_mean_h`
(each organisation's mean time in the system, deadlines or not; null without an `org` column), `finished`
(jobs ended in any way), `succeeded`, `jobs` and `wall_s`.
"""

import argparse
import csv
import heapq
import json
import math
import os
import random
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from pathlib import Path

MY_SCRATCH = "E31_BENCH_SCRATCH" not in os.environ  # a folder made for this run is deleted after it
import scratch  # noqa: E402

BEGIN = datetime(2030, 1, 1, tzinfo=UTC)  # the trace's second 0
SHARDS_PER_JOB = 200
SHORTEST_SHARD = 30  # seconds of work
WORK = "clean-table"


@dataclass(frozen=True)
class TraceJob:
    name: str
    submit: float  # seconds from the trace's start, compressed
    gpus: int
    duration: float  # true, at `gpus`
    deadline: float | None
    org: str
    fixed: bool
    max_gpus: int
    hours: Decimal  # what the request says

    @property
    def shard_seconds(self) -> int:
        return math.ceil(max(SHORTEST_SHARD, self.gpus * self.duration / SHARDS_PER_JOB))


def read_trace(path: Path, compress: float, seed: int, gpus: int) -> tuple[list[TraceJob], bool]:
    """The trace's jobs in arrival order, and whether it names organisations."""
    draw = random.Random(seed)
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    missing = {"submit_time", "num_gpu", "duration"} - set(rows[0] if rows else {})
    if missing:
        sys.exit(f"{path}: no {', '.join(sorted(missing))} column")
    jobs = []
    for n, row in enumerate(rows):
        submit, width, duration = float(row["submit_time"]), int(row["num_gpu"]), float(row["duration"])
        if not 1 <= width <= gpus or duration <= 0:
            sys.exit(f"{path}, job {n + 1}: {width} GPUs for {duration} s cannot run on {gpus} GPUs")
        ddl = (row.get("ddl") or "").strip()
        hours = Decimal(duration * draw.uniform(1, 2) / 3600).quantize(Decimal("0.01"), rounding=ROUND_CEILING)
        jobs.append(
            TraceJob(
                name=row.get("job_id") or str(n + 1),
                submit=submit / compress,
                gpus=width,
                duration=duration,
                deadline=submit / compress + float(ddl) - submit if ddl else None,
                org=(row.get("org") or "").strip() or "replay",
                fixed=(row.get("fixed") or "").strip() == "1",
                max_gpus=int(row.get("max_gpu") or 8 * width),
                hours=hours,
            )
        )
    jobs.sort(key=lambda job: job.submit)
    return jobs, "org" in rows[0]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--nodes", type=int, help="nodes the GPUs are spread over (default: 8 GPUs a node)")
    parser.add_argument("--compress", type=float, default=1.0, help="divide arrival times by this")
    parser.add_argument("--policy", choices=["default", "fifo"], default="default")
    parser.add_argument("--seed", type=int, default=1, help="draws each request's overestimate")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds a slot takes to start on a job")
    args = parser.parse_args()
    if args.gpus < 1 or args.compress <= 0 or args.warmup < 0:
        parser.error("--gpus must be at least 1, --compress above 0, --warmup not below 0")
    args.nodes = args.nodes or math.ceil(args.gpus / 8)
    if not 1 <= args.nodes <= args.gpus:
        parser.error("--nodes must be between 1 and --gpus")
    return args


def main() -> None:
    began = time.perf_counter()
    args = parse_args()
    trace, orgs = read_trace(args.trace, args.compress, args.seed, args.gpus)
    if not trace:
        sys.exit(f"{args.trace}: no jobs")
    scratch.setup(
        E31_LOG_LEVEL="WARNING",
        E31_MAX_HOURS=str(math.ceil(max(job.hours for job in trace))),
        E31_SHARD_LEASE_SECONDS=str(max(job.shard_seconds for job in trace) + 60),
    )
    try:
        figures = replay(trace, args, orgs)
    finally:
        if MY_SCRATCH:
            shutil.rmtree(scratch.SCRATCH, ignore_errors=True)
    figures["wall_s"] = round(time.perf_counter() - began, 1)
    print(json.dumps(figures))


def replay(trace: list[TraceJob], args: argparse.Namespace, orgs: bool) -> dict:
    import time_machine
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    with (
        scratch.embedded_broker(),
        time_machine.travel(BEGIN + timedelta(seconds=trace[0].submit), tick=False) as clock,
    ):
        bench = Replay(trace, args, clock)
        bench.run()
        return bench.figures(orgs)


def fifo_pass() -> list[int]:
    """Today's policy, kept here to measure a new one against: the queue in order, each job started
    only when all its GPUs are free at once, the pass stopped at the first job that must wait; a job
    past its deadline ends unheld, one wider than the nodes that can run it waits aside."""
    from django.db import transaction

    from jobs import lifecycle, scheduling

    with transaction.atomic():
        slots = scheduling.schedulable_slots()
        free = list(slots.free().order_by("node__name", "index"))
        plan = []
        for job in scheduling.waiting().iterator(chunk_size=64):
            if job.deadline_passed():
                lifecycle.miss_deadline(job)
                continue
            nodes = set(scheduling.nodes_running(job.work))
            if job.gpus > slots.online().filter(node__in=nodes).count():
                continue
            fit = [slot for slot in free if slot.node_id in nodes][: job.gpus]
            if len(fit) < job.gpus:
                break
            free = [slot for slot in free if slot not in fit]
            plan.append((job, fit))
        return list(lifecycle.start_holds(plan, send=True))


class Slot:
    """A slot as its worker would serve it: the hold it works, and the shard it runs."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.job = None
        self.job_id: int | None = None
        self.allocation_id: int | None = None
        self.turn = 0  # a new hold, or its end, makes the events of the last one stale
        self.serving_since: float | None = None


class Replay:
    def __init__(self, trace: list[TraceJob], args: argparse.Namespace, clock):
        from billing.models import RateCard
        from jobs.models import Gpu, Node
        from jobs.signals import hold_released, state_changed
        from portal.models import Organisation

        self.trace, self.args, self.clock = trace, args, clock
        self.now = trace[0].submit
        self.events: list[tuple[float, int, Callable, tuple]] = []
        self.sequence = 0
        self.sent: list[tuple[str, tuple, str | None]] = []
        self.control_due = False
        RateCard.objects.create(rate_per_gpu_hour=1, effective_from=BEGIN - timedelta(days=1), note="replay")
        self.orgs = {
            name: Organisation.objects.create(name=f"Replay {name}", slug=f"replay-{n}")
            for n, name in enumerate(sorted({job.org for job in trace}))
        }
        nodes = Node.objects.bulk_create(
            Node(name=f"replay-{n}", hostname="replay", last_seen=self._at(), work_kinds=[WORK])
            for n in range(args.nodes)
        )
        gpus = Gpu.objects.bulk_create(
            Gpu(node=nodes[i % args.nodes], index=i // args.nodes, kind=Gpu.Kind.GPU, name="replay",
                queue=f"replay.{i % args.nodes}.{i // args.nodes}", last_seen=self._at())
            for i in range(args.gpus)
        )  # fmt: skip
        self.slots = {gpu.queue: Slot(gpu) for gpu in gpus}
        self.ask: dict[int, TraceJob] = {}
        self.waiting_gpus = 0  # asked for by queued jobs
        self.held = 0
        self.ended = 0
        self.idle_while_waiting = 0.0  # slot-seconds
        self.served = 0.0  # slot-seconds on shards
        self.shards = 0
        self.passes = 0  # scheduling passes run
        state_changed.connect(self._state_changed, dispatch_uid="replay")
        hold_released.connect(self._hold_released, dispatch_uid="replay")

    def _at(self, seconds: float | None = None) -> datetime:
        return BEGIN + timedelta(seconds=self.now if seconds is None else seconds)

    def push(self, at: float, call: Callable, *args) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (at, self.sequence, call, args))

    def run(self) -> None:
        from jobs import enqueue
        from portal.celery import app

        app.loader.import_default_modules()
        scratch.as_a_pool_process()  # as the workers do: what was imported is left out of every collection
        self.tasks = app.tasks
        enqueue.send_on_commit = self._send_on_commit
        for job in self.trace:
            self.push(job.submit, self.arrive, job)
        while self.events and self.ended < len(self.trace):
            at, _, call, args = heapq.heappop(self.events)
            self._advance(at)
            call(*args)
            self._drain()

    def _send_on_commit(self, name: str, *args, queue: str | None = None, **options) -> None:
        """enqueue.send_on_commit, caught: the task is kept to run here once the transaction commits."""
        from django.db import transaction

        transaction.on_commit(lambda: self.sent.append((name, args, queue)))

    def _advance(self, at: float) -> None:
        if at > self.now:
            free = self.args.gpus - self.held
            self.idle_while_waiting += (at - self.now) * min(free, self.waiting_gpus)
            self.now = at
            self.clock.move_to(self._at())

    def _drain(self) -> None:
        """Run what was sent, as the workers would take it, until nothing more is."""
        while self.sent or self.control_due:
            if not self.sent:
                self.control_due = False
                self._schedule()
                continue
            name, args, queue = self.sent.pop(0)
            if name == "jobs.tasks.schedule":
                self.control_due = True
            elif name == "jobs.tasks.run_slot":
                self.serve(self.slots[queue], *args[:2])
            elif name == "jobs.tasks.assemble":
                self.assemble(*args)

    def _schedule(self) -> None:
        from jobs import scheduling

        self._seen()
        self.passes += 1
        if self.args.policy == "fifo":
            fifo_pass()
            scheduling.refresh_queue_figures()
        else:
            self.tasks["jobs.tasks.schedule"]()

    def _seen(self) -> None:
        """The nodes beat: every slot is seen now."""
        from jobs.models import Gpu, Node

        Node.objects.update(last_seen=self._at())
        Gpu.objects.update(last_seen=self._at())

    def arrive(self, trace_job: TraceJob) -> None:
        from django.utils import timezone

        from jobs import lifecycle, scheduling
        from jobs.models import Job, Shard

        fixed = trace_job.fixed or self.args.policy == "fifo"
        request = Job.Request.FIXED if fixed else Job.Request.FLEXIBLE
        deadline = None if trace_job.deadline is None else self._at(trace_job.deadline)
        job = Job(
            organisation=self.orgs[trace_job.org],
            work=WORK,
            source_name=f"{trace_job.name}.csv",
            gpus=trace_job.gpus,
            hours=trace_job.hours,
            request=request,
            max_gpus=None if fixed else trace_job.max_gpus,
            deadline=deadline,
        )
        if deadline is not None and self.args.policy != "fifo":
            self._seen()
            job.expected_start, job.expected_finish = scheduling.outlook(job)
            job.deadline_feasible = job.expected_finish is not None and job.expected_finish <= deadline
        job.save()
        self.ask[job.pk] = trace_job
        lifecycle.begin_staging(job, uuid.uuid4().hex, timezone.now() + timedelta(minutes=5))
        work, each = round(trace_job.gpus * trace_job.duration), trace_job.shard_seconds
        shards = [
            Shard(job=job, index=n, first_record=first + 1, record_count=min(each, work - first),
                  first_line=first + 2, start_byte=first, end_byte=min(first + each, work))
            for n, first in enumerate(range(0, work, each))
        ]  # fmt: skip
        Shard.objects.bulk_create(shards)
        self.shards += len(shards)
        lifecycle.queue(job, at=timezone.now(), message=f"{len(shards)} shards of {each} s of work (replay)")
        if trace_job.deadline is not None:
            self.push(max(trace_job.deadline, self.now), self.beat)

    def beat(self) -> None:
        """Beat's time limits, and its pass."""
        self.tasks["jobs.tasks.enforce_time_limits"]()
        self.control_due = True

    def serve(self, slot: Slot, job_id: int, allocation_id: int) -> None:
        """A hold's slot task arrives: the slot starts on the job, then takes its shards."""
        slot.job, slot.job_id, slot.allocation_id = None, job_id, allocation_id
        slot.turn += 1
        self.held += 1
        self.push(self.now + self.args.warmup, self.step, slot, slot.turn)

    def step(self, slot: Slot, turn: int) -> None:
        """One turn of the runner's loop: its time limit, then the next shard, or the pass's end."""
        from jobs import lifecycle
        from jobs.models import Job, Shard
        from jobs.workers import runner

        if turn != slot.turn:
            return
        if slot.job is None:
            slot.job = Job.objects.get(pk=slot.job_id)
        asked = slot.job.flexible and runner.asked_back(slot.job, slot.allocation_id)
        if slot.job.time_limit_passed():
            lifecycle.time_out(slot.job)
            return
        if asked and lifecycle.give_back(slot.allocation_id):
            return self.given_back(slot)
        claimed = runner.claim_next(slot.job, slot.gpu)
        if claimed is None:
            if not Shard.objects.filter(job=slot.job).exclude(status__in=Shard.SETTLED).exists():
                lifecycle.finish_pass(slot.job)
            elif slot.job.flexible and lifecycle.give_back(slot.allocation_id, idle=True):
                self.given_back(slot)
            return  # the last shards run on its other slots
        shard, token = claimed
        slot.serving_since = self.now
        self.push(self.now + shard.record_count, self.done, slot, turn, shard, token)

    def given_back(self, slot: Slot) -> None:
        """The slot's hold ended at a shard boundary: it serves no job until a pass gives it one."""
        slot.job, slot.job_id, slot.allocation_id, slot.serving_since = None, None, None, None
        slot.turn += 1
        self.held -= 1

    def done(self, slot: Slot, turn: int, shard, token: str) -> None:
        """The shard's work is done: marked done under its claim, as the runner does."""
        from django.utils import timezone

        from jobs.models import Shard

        if turn != slot.turn:
            return
        Shard.objects.filter(pk=shard.pk, claim=token, status=Shard.Status.RUNNING).update(
            status=Shard.Status.DONE,
            records_out=shard.record_count,
            records_rejected=0,
            finished_at=timezone.now(),
            lease_until=None,
            error="",
        )
        self.served += self.now - slot.serving_since
        slot.serving_since = None
        self.step(slot, turn)

    def assemble(self, job_id: int) -> None:
        from jobs import lifecycle
        from jobs.models import Job, State

        job = Job.objects.get(pk=job_id)
        if job.state == State.FINISHING:
            lifecycle.succeed(job, "output assembled (replay: no files)")

    def _state_changed(self, sender, job_id: int, state: str, previous: str, **kwargs) -> None:
        from jobs.models import ENDED, State

        gpus = self.ask[job_id].gpus
        self.waiting_gpus += gpus * ((state == State.QUEUED) - (previous == State.QUEUED))
        if state == State.RUNNING:
            self.push(self.now + float(self.ask[job_id].hours) * 3600, self.beat)
        self.ended += state in ENDED

    def _hold_released(self, sender, job, **kwargs) -> None:
        for slot in self.slots.values():
            if slot.job_id == job.pk:
                if slot.serving_since is not None:
                    self.served += self.now - slot.serving_since
                slot.job, slot.job_id, slot.serving_since = None, None, None
                slot.turn += 1
                self.held -= 1

    def figures(self, orgs: bool) -> dict:
        from jobs.models import ENDED, Job, State

        rows = Job.objects.values_list("pk", "created", "started_at", "ended_at", "state", "deadline_feasible")
        jobs = [
            Outcome(self.ask[pk], *(_seconds(at) for at in times), state, feasible)
            for pk, *times, state, feasible in rows
        ]
        if stuck := [job for job in jobs if job.state not in ENDED]:
            sys.exit(f"{len(stuck)} jobs never ended, the first {stuck[0].ask.name} {stuck[0].state}")
        first, last = min(job.submitted for job in jobs), max(job.ended for job in jobs)
        capacity = self.args.gpus * (last - first)
        with_deadline = [job for job in jobs if job.ask.deadline is not None]
        met = [job for job in with_deadline if job.met]
        told = [job for job in with_deadline if job.feasible is False]  # at submit: best effort, unprotected
        waits = sorted(job.wait for job in jobs)
        completions = [job.in_system / 3600 for job in jobs if job.ask.deadline is None]
        slowdowns: dict[str, list[float]] = {}
        in_system: dict[str, list[float]] = {}
        for job in jobs:
            slowdowns.setdefault(job.ask.org, []).append(job.in_system / job.ask.duration)
            in_system.setdefault(job.ask.org, []).append(job.in_system / 3600)
        print(
            f"{self.args.policy}: {len(jobs)} jobs, {self.shards} shards on {self.args.gpus} GPUs "
            f"({self.args.nodes} nodes), {self.passes} scheduling passes, {(last - first) / 3600:.1f} simulated hours",
            file=sys.stderr,
        )
        return {
            "deadlines_met": _round(len(met) / len(with_deadline)) if with_deadline else None,
            "deadlines_told_infeasible": len(told) if with_deadline else None,
            "deadlines_missed_not_told": sum(not job.met and job.feasible is not False for job in with_deadline)
            if with_deadline
            else None,
            "jct_mean_h": _round(sum(completions) / len(completions)) if completions else None,
            "wait_mean_h": _round(sum(waits) / len(waits)),
            "wait_p95_h": _round(waits[math.ceil(0.95 * len(waits)) - 1]),
            "utilisation": _round(self.served / capacity) if capacity else None,
            "idle_share_while_waiting": _round(self.idle_while_waiting / capacity) if capacity else None,
            "max_org_slowdown": _round(max(sum(s) / len(s) for s in slowdowns.values())) if orgs else None,
            "org_jct_mean_h": {org: _round(sum(t) / len(t)) for org, t in sorted(in_system.items())} if orgs else None,
            "finished": len(jobs),
            "succeeded": sum(job.state == State.SUCCEEDED for job in jobs),
            "jobs": len(self.trace),
        }


@dataclass(frozen=True)
class Outcome:
    """A job of the trace as it went, in seconds of the trace."""

    ask: TraceJob
    submitted: float
    started: float | None  # its first hold; None when it never had one
    ended: float
    state: str
    feasible: bool | None  # what it was told at submit of its deadline; None without one, or under FIFO

    @property
    def wait(self) -> float:
        """Hours from submit to its first hold, or to its end when it never had one."""
        return ((self.ended if self.started is None else self.started) - self.submitted) / 3600

    @property
    def in_system(self) -> float:
        return self.ended - self.submitted

    @property
    def met(self) -> bool:
        """Whether it succeeded by its deadline (one it has)."""
        from jobs.models import State

        return self.state == State.SUCCEEDED and self.ended <= self.ask.deadline


def _seconds(at: datetime | None) -> float | None:
    return None if at is None else (at - BEGIN).total_seconds()


def _round(value: float) -> float:
    return round(value, 4)


if __name__ == "__main__":
    main()
