"""Replay a job trace through the real scheduler, lifecycle and shard claims, in simulated time (issue 31).

    .venv/bin/python bench/replay.py --trace bench/traces/philly_like.csv --gpus 64 [--nodes K]
        [--compress C] [--policy default|fifo] [--seed S] [--warmup S] [--exact]
    .venv/bin/python bench/replay.py --suite [all|tuning|untouched] [--exact]

The trace is a CSV of `submit_time,num_gpu,duration` (seconds; a job's true duration at its num_gpu),
and optionally `job_id`, `ddl` (an absolute deadline in the trace's seconds; empty: none), `org`,
`fixed` and `max_gpu`. `--compress C` divides arrival times by C and keeps each deadline's slack.

It runs on a scratch var/ of its own (bench/scratch.py: SQLite, the embedded Redis), with `--gpus` slots
on `--nodes` nodes (default: 8 a node), and nothing waits on the wall clock: the clock the portal reads
(datetime's and time's, through time-machine) is frozen and moved from event to event, in this process
only. No Celery worker runs; the tasks the code sends are caught as they would leave after commit:
- `jobs.tasks.schedule` runs here as the control worker runs it: its pass, `scheduling.schedule`
  (`--policy default`), or `fifo_pass` below (`--policy fifo`); the nodes beat just before. The queue's
  figures it then stores for the pages (`refresh_queue_figures`) are worked out only with `--exact`:
  nothing the replay measures reads them;
- `jobs.tasks.run_slot` makes the slot work its hold as `jobs.workers.runner.run_slot` does: after
  `--warmup` seconds (a slot's start on a job, billed), at each shard boundary it checks its time limit and
  whether it was asked back (`runner.asked_back`, `lifecycle.give_back`), takes the next shard, done after
  its records at one record a second, and the slot that finds none left calls `lifecycle.finish_pass` (or
  gives its hold back, idle). With `--exact`, each claim is `runner.claim_next`'s and each shard is marked
  done under its claim, one event a shard. Without it (issue 41), a slot's consecutive claims of one job are
  one event (`Run`): the shards each slot takes are worked out ahead, in the order of the slots' boundaries,
  and worked out again when a pass asks a slot back or moves the job's time limit, or a slot joins; the
  database is told what they did (done, running) before anything reads it, so a pass, the outlook and the
  lifecycle see the shards as the exact path leaves them;
- `jobs.tasks.assemble` is taken as instant: a finishing job succeeds (`lifecycle.succeed`);
- beat's `jobs.tasks.enforce_time_limits`, and a pass, run at each deadline and each time limit a job
  reaches at the hours it asked for, while the job waits or runs; beat's pass (every 5 s on the portal) also
  runs when a job's first shard is done, as the scheduler sizes a running job from its shards;
- the rest (emails, purges) are dropped.
What an event sent runs after it, a pass last, before the next event; but an event at the same instant that does
the same whatever a pass does (a slot's turn at a job with no shard left to take, beat's look at the limits) runs
before that pass, which then comes after both: the w slots of a job ending at one second make one pass, not w
(`Replay._heedless`).
A job arrives as a row with its shards, staged at once (`lifecycle.begin_staging`, `lifecycle.queue`).
What the scheduler is told is the request: the duration × a factor drawn from [1, 2] (`--seed`), never
the true duration. A job's shards are max(30 s, its GPU-seconds / 200) of work. A job is a flexible
request with a width cap of `max_gpu` (else 8 × `num_gpu`) unless `fixed` is 1 (`--policy fifo`: all
fixed, as before flexible requests). A slot asked back (or left with no shard to take) gives its hold
back at its shard boundary with `lifecycle.give_back`, as the runner does. A job with a deadline is told
at submit whether it can meet it (`scheduling.outlook`, `policy.can_promise`, as the portal tells it); one
that cannot is submitted anyway, as best effort. A shard's lease is set past the longest shard, as the slot's lease
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
(jobs ended in any way), `succeeded`, `jobs`, `deadline_jobs`, `deadlines_missed_how` (those missed while
told feasible, by how they ended) and `wall_s`.

`--suite` replays every trace of bench/traces/family.py (or its `tuning` or `untouched` half), each with
`--policy fifo` and `--policy default`, one process a replay, and prints a row a trace against issue 41's
targets (a failed one marked ✗), a summary a half, and one JSON object with every replay's figures.
"""

import argparse
import bisect
import csv
import heapq
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from itertools import chain
from pathlib import Path

MY_SCRATCH = "E31_BENCH_SCRATCH" not in os.environ  # a folder made for this run is deleted after it
import scratch  # noqa: E402

BEGIN = datetime(2030, 1, 1, tzinfo=UTC)  # the trace's second 0
SHARDS_PER_JOB = 200
SHORTEST_SHARD = 30  # seconds of work
WORK = "clean-table"
# Beat's pass after a job's first shard is done comes this long after it (within beat's 5 s): once every turn of
# a slot at that boundary is taken, the same on both paths, and before the next whole second's events.
FIRST_SHARD_PASS = 0.5


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
    parser.add_argument("--trace", type=Path)
    parser.add_argument("--gpus", type=int)
    parser.add_argument(
        "--suite",
        nargs="?",
        const="all",
        choices=["all", "tuning", "untouched"],
        help="replay the family of traces (bench/traces/family.py), each with FIFO and the default policy",
    )
    parser.add_argument(
        "--fifo-from", type=Path, help="with --suite: FIFO's figures from an earlier suite's JSON (its last line)"
    )
    parser.add_argument("--nodes", type=int, help="nodes the GPUs are spread over (default: 8 GPUs a node)")
    parser.add_argument("--compress", type=float, default=1.0, help="divide arrival times by this")
    parser.add_argument("--policy", choices=["default", "fifo"], default="default")
    parser.add_argument("--seed", type=int, default=1, help="draws each request's overestimate")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds a slot takes to start on a job")
    parser.add_argument(
        "--exact", action="store_true", help="claim and mark each shard in the database as it runs (the slow reference)"
    )
    args = parser.parse_args()
    if args.suite:
        return args
    if args.trace is None or args.gpus is None:
        parser.error("--trace and --gpus are needed, unless --suite")
    if args.gpus < 1 or args.compress <= 0 or args.warmup < 0:
        parser.error("--gpus must be at least 1, --compress above 0, --warmup not below 0")
    args.nodes = args.nodes or math.ceil(args.gpus / 8)
    if not 1 <= args.nodes <= args.gpus:
        parser.error("--nodes must be between 1 and --gpus")
    return args


def main() -> None:
    began = time.perf_counter()
    args = parse_args()
    if args.suite:
        shutil.rmtree(scratch.SCRATCH, ignore_errors=True)  # each replay of the suite makes its own
        return suite(args)
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


# Issue 41's targets on every trace of the family, each against FIFO on the same trace.
TARGETS = (
    "deadlines met ≥ 0.95 (or ≤ 1 % of those told feasible missed), completion without a deadline ≤ 0.5 × "
    "FIFO's, p95 wait ≤ FIFO's, worst organisation's slowdown ≤ FIFO's, idle while waiting ≤ 0.005"
)


def suite(args: argparse.Namespace) -> None:
    """Replay each trace of the family (`args.suite`: all, or one half) with FIFO and the default policy, one
    process a replay; print a row a trace and a summary, then one JSON object with every figure."""
    import tempfile

    from traces import family

    specs = [spec for spec in family.FAMILY if args.suite in ("all", spec.half)]
    env = {key: value for key, value in os.environ.items() if key != "E31_BENCH_SCRATCH"}
    results = []
    earlier = {}
    if args.fifo_from:
        earlier = {
            row["trace"]: row["fifo"] for row in json.loads(args.fifo_from.read_text().splitlines()[-1])["traces"]
        }
    print(f"targets: {TARGETS}", file=sys.stderr)
    print(f"| {' | '.join(SUITE_COLUMNS)} |\n|{'---|' * len(SUITE_COLUMNS)}")
    with tempfile.TemporaryDirectory(prefix="e31-suite-") as folder:
        for spec in specs:
            trace = family.write(spec, Path(folder))
            figures = {"fifo": earlier[spec.name]} if spec.name in earlier else {}
            for policy in [policy for policy in ("fifo", "default") if policy not in figures]:
                argv = [sys.executable, __file__, "--trace", str(trace), "--gpus", str(spec.gpus), "--policy", policy]
                argv += ["--seed", str(args.seed), "--warmup", str(args.warmup), *(["--exact"] if args.exact else [])]
                done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
                if done.returncode:
                    sys.exit(f"{spec.name}, {policy}: {done.stderr.strip().splitlines()[-1:]}")
                figures[policy] = json.loads(done.stdout.splitlines()[-1])
            row = {
                "trace": spec.name,
                "half": spec.half,
                **figures,
                "met": _targets(figures["fifo"], figures["default"]),
            }
            results.append(row)
            print(_suite_row(spec, row), flush=True)
    summary = {
        half: {target: sum(row["met"][target] for row in rows) for target in TARGET_NAMES} | {"traces": len(rows)}
        for half in ("tuning", "untouched")
        if (rows := [row for row in results if row["half"] == half])
    }
    for half, counts in summary.items():
        met = ", ".join(f"{target} {counts[target]}/{counts['traces']}" for target in TARGET_NAMES)
        print(f"{half}: targets met on {met}")
    print(json.dumps({"traces": results, "summary": summary}))


TARGET_NAMES = ("deadlines", "completion", "p95_wait", "slowdown", "idle")
SUITE_COLUMNS = (
    "trace", "half", "jobs × GPUs, load", "deadlines met", "completion, no deadline",
    "p95 wait", "worst org slowdown", "idle while waiting", "wall",
)  # fmt: skip


def _targets(fifo: dict, ours: dict) -> dict[str, bool]:
    """Which of issue 41's targets the default policy meets on a trace, against FIFO's figures on it."""
    told_feasible = (ours["deadline_jobs"] or 0) - (ours["deadlines_told_infeasible"] or 0)
    return {
        "deadlines": ours["deadlines_met"] is None
        or ours["deadlines_met"] >= 0.95
        or (ours["deadlines_missed_not_told"] or 0) <= 0.01 * told_feasible,
        "completion": ours["jct_mean_h"] is None or ours["jct_mean_h"] <= 0.5 * fifo["jct_mean_h"],
        "p95_wait": ours["wait_p95_h"] <= fifo["wait_p95_h"],
        "slowdown": ours["max_org_slowdown"] is None or ours["max_org_slowdown"] <= fifo["max_org_slowdown"],
        "idle": ours["idle_share_while_waiting"] <= 0.005,
    }


def _suite_row(spec, row: dict) -> str:
    fifo, ours, met = row["fifo"], row["default"], row["met"]

    def mark(target: str) -> str:
        return "" if met[target] else " ✗"

    deadlines = "–"
    if ours["deadlines_met"] is not None:
        deadlines = (
            f"{ours['deadlines_met']:.3f} (FIFO {fifo['deadlines_met']:.3f}; {ours['deadlines_missed_not_told']} "
            f"missed of those told feasible){mark('deadlines')}"
        )
    completion, slowdown = "–", "–"
    if ours["jct_mean_h"] is not None:
        ratio = ours["jct_mean_h"] / fifo["jct_mean_h"]
        completion = f"{ours['jct_mean_h']:.3f} h = {ratio:.2f} × FIFO{mark('completion')}"
    if ours["max_org_slowdown"] is not None:
        slowdown = f"{ours['max_org_slowdown']:.2f} (FIFO {fifo['max_org_slowdown']:.2f}){mark('slowdown')}"
    cells = (
        spec.name, spec.half, f"{spec.jobs} × {spec.gpus}, {spec.load}", deadlines, completion,
        f"{ours['wait_p95_h']:.2f} h (FIFO {fifo['wait_p95_h']:.2f}){mark('p95_wait')}", slowdown,
        f"{ours['idle_share_while_waiting']:.4f} (FIFO {fifo['idle_share_while_waiting']:.4f}){mark('idle')}",
        f"{ours['wall_s']:.0f} s (FIFO {fifo['wall_s']:.0f} s)",
    )  # fmt: skip
    return f"| {' | '.join(cells)} |"


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
        self.leaving = False  # asked back: it takes no shard past the one it runs


class Run:
    """A job's shards as its slots take them, without `--exact`: worked out ahead rather than claimed one by
    one. Each slot working the job takes the next shard at each of its boundaries, in the order of the
    boundaries, as `runner.claim_next` would give them, until none is left, its time limit comes, or it was
    asked back; so a slot's consecutive claims are one event, its last boundary. The plan is worked out again
    whenever what it assumed changes (a slot joins, one is asked back, the limit moves). The database is told
    what the claims did (`Replay._settle`) before anything reads it: a pass, the outlook, the lifecycle.

    A claim at a boundary is made once the clock passes it: a pass at the very time of a boundary runs before
    the slot's turn, as a pass sent by another event at that time would; a slot's own turn (a step) claims at
    once."""

    def __init__(self, job: int, total: int, each: int, last: int):
        self.job = job
        self.total = total  # shards, index 0 first
        self.each, self.last = each, last  # seconds of work of a shard, and of the last one
        self.claims: list[float] = []  # when each shard was (or will be) claimed, in index order
        self.owners: list[Slot] = []  # by whom
        self.seconds: list[int] = []  # for how long
        self.stepped: list[bool] = []  # claimed in a slot's turn, not at a boundary
        self.ends: list[float] = []  # when they end, sorted
        self.slots: set[Slot] = set()  # the slots working it
        self.limit: float | None = None  # its time limit: no shard is taken at or past it
        self.done_written = 0  # shards the database has as done, from index 0
        self.claimed_written = 0  # shards it has as done or running

    def claimed(self, now: float) -> int:
        """How many shards were claimed by `now`."""
        before = bisect.bisect_left(self.claims, now)
        return before + sum(self.stepped[before : bisect.bisect_right(self.claims, now)])

    def plan(self, now: float, stepping: "Slot | None" = None) -> list[tuple[float, "Slot"]]:
        """Work the claims out again from `now` (`stepping`: the slot whose turn it is), for the slots working
        the job: when each stops, at a boundary where it takes no shard (its next turn)."""
        tail = bisect.bisect_left(self.claims, now)
        kept = [n for n in range(tail, len(self.claims)) if self.claims[n] == now and self.stepped[n]]
        for n in range(len(self.claims) - 1, tail - 1, -1):  # the claims not made yet
            del self.ends[bisect.bisect_left(self.ends, self.claims[n] + self.seconds[n])]
        for column in (self.claims, self.owners, self.seconds, self.stepped):
            column[tail:] = [column[n] for n in kept]
        for n in kept:
            bisect.insort(self.ends, now + self.seconds[n])
        free_at, left = {}, set(self.slots)
        for n in range(len(self.claims) - 1, -1, -1):  # each slot is free when its last shard ends
            if not left:
                break
            if (owner := self.owners[n]) in left:
                free_at[owner] = max(now, self.claims[n] + self.seconds[n])
                left.discard(owner)
        free_at.update((slot, now) for slot in left)
        free = [(at, slot is not stepping, slot.gpu.pk, slot) for slot, at in free_at.items()]  # its turn first
        heapq.heapify(free)
        stops = []
        while free:
            at, _, order, slot = heapq.heappop(free)
            if slot.leaving or len(self.claims) >= self.total or (self.limit is not None and at >= self.limit):
                stops.append((at, slot))
                continue
            seconds = self.last if len(self.claims) == self.total - 1 else self.each
            self.claims.append(at)
            self.owners.append(slot)
            self.seconds.append(seconds)
            self.stepped.append(slot is stepping and at == now)
            bisect.insort(self.ends, at + seconds)
            heapq.heappush(free, (at + seconds, True, order, slot))
        return stops


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
        self.runs: dict[int, Run] = {}  # without --exact: each job's shards, worked out ahead
        self.unsettled: set[Run] = set()  # those whose claims the database may not have yet
        self.waiting_gpus = 0  # asked for by queued jobs
        self.held = 0
        self.ended = 0
        self.gone: set[int] = set()  # the jobs that ended
        self.measured: set[int] = set()  # the jobs with a shard done: beat's pass has sized them from it
        self.last_beat: float | None = None
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
            while self.events and self.events[0][0] == at and self._heedless(*self.events[0][2:]):
                _, _, call, args = heapq.heappop(self.events)
                call(*args)
            self._drain()

    def _heedless(self, call: Callable, args: tuple) -> bool:
        """Whether an event does the same whatever a pass just before it does, so that the passes it and the
        events before it at the same instant send can be one, after them all: beat's look at the time limits, its
        pass after a job's first shard, a turn made stale, and a slot's turn at a job with no shard left to take
        (it gives its hold back or finishes the job: the w slots of a job ending together make one pass, not w)."""
        from jobs.models import Shard

        if call in (self.beat, self._first_shard):
            return True
        if call not in (self.step, self.done):
            return False
        slot, turn = args[:2]
        if turn != slot.turn or slot.job_id is None:
            return True
        if self.args.exact:
            return not Shard.objects.filter(job=slot.job_id, status=Shard.Status.PENDING).exists()
        run = self.runs.get(slot.job_id)
        return run is not None and run.claimed(self.now) >= run.total

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
        self._settle()
        self.passes += 1
        if self.args.policy == "fifo":
            fifo_pass()
        else:
            scheduling.schedule()
        if self.args.exact:  # the queue's figures, as the schedule task stores them after its pass: shown, not used
            scheduling.refresh_queue_figures()
        self._heed_the_pass()

    def _seen(self) -> None:
        """The nodes beat, as often as a gpuworker does: every slot is seen now."""
        from django.conf import settings

        from jobs.models import Gpu, Node

        if self.last_beat is not None and self.now - self.last_beat < settings.E31_HEARTBEAT_SECONDS:
            return
        self.last_beat = self.now
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
            self._settle()
            job.expected_start, job.expected_finish = scheduling.outlook(job)
            job.deadline_feasible = scheduling.policy.can_promise(job.expected_finish, deadline, timezone.now())
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
        if not self.args.exact:
            self.runs[job.pk] = Run(job.pk, len(shards), each, work - each * (len(shards) - 1))
        lifecycle.queue(job, at=timezone.now(), message=f"{len(shards)} shards of {each} s of work (replay)")
        if trace_job.deadline is not None:
            self.push(max(trace_job.deadline, self.now), self.beat, job.pk)

    def beat(self, job_id: int) -> None:
        """Beat's time limits, and its pass, at a job's deadline or time limit: only while the job waits or
        runs (the portal's beat runs every few seconds; a replay runs it when a job may have reached one)."""
        if job_id in self.gone:
            return
        self._settle()
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
        self._settle()
        asked = slot.job.flexible and runner.asked_back(slot.job, slot.allocation_id)
        if slot.job.time_limit_passed():
            lifecycle.time_out(slot.job)
            return
        if asked and lifecycle.give_back(slot.allocation_id):
            return self.given_back(slot)
        if not self.args.exact:
            return self._take_shards(slot)
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

    def _take_shards(self, slot: Slot) -> None:
        """Without --exact, a turn at a boundary: the slot joins the job's plan while shards are left (its
        next turn is its last boundary), or, with none, does what the runner does when it claims none."""
        from jobs import lifecycle
        from jobs.models import Shard

        run = self.runs[slot.job_id]
        if run.claimed(self.now) < run.total:
            slot.leaving = False
            slot.serving_since = self.now if slot.serving_since is None else slot.serving_since
            run.slots.add(slot)
            run.limit = _seconds(slot.job.time_limit_at())
            return self._plan(run, slot)
        self._stop_serving(slot)
        run.slots.discard(slot)
        if not Shard.objects.filter(job=slot.job).exclude(status__in=Shard.SETTLED).exists():
            lifecycle.finish_pass(slot.job)
        elif slot.job.flexible and lifecycle.give_back(slot.allocation_id, idle=True):
            self.given_back(slot)

    def _plan(self, run: Run, stepping: Slot | None = None) -> None:
        """The job's claims worked out again from now: each slot's next turn is where it stops."""
        for at, slot in run.plan(self.now, stepping):
            slot.turn += 1
            self.push(at, self.step, slot, slot.turn)
        self.unsettled.add(run)
        if run.job not in self.measured and run.ends:
            self.push(run.ends[0] + FIRST_SHARD_PASS, self._first_shard, run.job)

    def _first_shard(self, job_id: int) -> None:
        """Beat's pass once the job's first shard is done (without --exact: if the plan still has it done)."""
        run = self.runs.get(job_id)
        ended = self.args.exact or (run is not None and bisect.bisect_right(run.ends, self.now))
        if job_id in self.measured or job_id in self.gone or not ended:
            return
        self.measured.add(job_id)
        self.control_due = True

    def _settle(self) -> None:
        """Write what the worked-out claims did by now, as the runner would have: the shards done, then those
        running, in index order, in two statements for every job; then each shard done's start and end, as the
        runner writes them (the scheduler measures a running job's shards from them), in one."""
        if not self.unsettled:
            return
        from django.db import connection
        from django.utils import timezone

        from jobs.models import Shard

        done, running, timed = [], [], []
        for run in list(self.unsettled):
            ended, claimed = bisect.bisect_right(run.ends, self.now), run.claimed(self.now)
            if ended > run.done_written:
                done.append((run.job, run.done_written, ended))
                timed.extend((*self._times(run, n), run.job, n) for n in range(run.done_written, ended))
            if claimed > max(ended, run.claimed_written):
                running.append((run.job, max(ended, run.claimed_written), claimed))
            run.done_written, run.claimed_written = ended, max(claimed, run.claimed_written)
            if not run.slots and ended == len(run.claims):
                self.unsettled.discard(run)
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        table, index = Shard._meta.db_table, connection.ops.quote_name("index")
        for ranges, assignments, values in (
            (done, "status = %s, records_out = record_count, records_rejected = 0, lease_until = NULL, claim = ''",
                   [Shard.Status.DONE]),
            (running, "status = %s, claim = %s, attempts = attempts + 1, started_at = %s, records_done = 0",
                      [Shard.Status.RUNNING, "replay", now]),
        ):  # fmt: skip
            if ranges:
                where = " OR ".join(f"(job_id = %s AND {index} >= %s AND {index} < %s)" for _ in ranges)
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"UPDATE {table} SET {assignments} WHERE {where}", [*values, *chain.from_iterable(ranges)]
                    )
        if timed:
            with connection.cursor() as cursor:
                cursor.executemany(
                    f"UPDATE {table} SET started_at = %s, finished_at = %s WHERE job_id = %s AND {index} = %s", timed
                )

    @staticmethod
    def _times(run: Run, n: int) -> tuple:
        """When shard `n` of the run was claimed and done, as the database takes them."""
        from django.db import connection

        claimed = BEGIN + timedelta(seconds=run.claims[n])
        done = claimed + timedelta(seconds=run.seconds[n])
        return tuple(connection.ops.adapt_datetimefield_value(at) for at in (claimed, done))

    def _heed_the_pass(self) -> None:
        """Without --exact, what a pass changed for the slots at work, which the runner reads at each boundary:
        a slot asked back takes no shard past the one it runs; a job widened has a nearer time limit."""
        working = [run for run in self.unsettled if run.slots]
        if not working:
            return
        from jobs.models import Allocation, Job

        asked = set(Allocation.objects.filter(held_to=None, give_back=True).values_list("pk", flat=True))
        limits = {job.pk: _seconds(job.time_limit_at()) for job in Job.objects.filter(
            pk__in=[run.job for run in working]).only("started_at", "hours", "held_before", "deadline", "request",
                                                     "budget_ends_at", "state")}  # fmt: skip
        for run in working:
            leaving = [slot for slot in run.slots if slot.allocation_id in asked and not slot.leaving]
            for slot in leaving:
                slot.leaving = True
            if leaving or limits.get(run.job, run.limit) != run.limit:
                run.limit = limits.get(run.job, run.limit)
                self._plan(run)

    def _stop_serving(self, slot: Slot) -> None:
        if slot.serving_since is not None:
            self.served += self.now - slot.serving_since
            slot.serving_since = None

    def given_back(self, slot: Slot) -> None:
        """The slot's hold ended at a shard boundary: it serves no job until a pass gives it one."""
        self._stop_serving(slot)
        if (run := self.runs.get(slot.job_id)) is not None:
            run.slots.discard(slot)
        slot.job, slot.job_id, slot.allocation_id, slot.leaving = None, None, None, False
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
        if slot.job_id not in self.measured:
            self.push(self.now + FIRST_SHARD_PASS, self._first_shard, slot.job_id)
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
            self.push(self.now + float(self.ask[job_id].hours) * 3600, self.beat, job_id)
        if state in ENDED:
            self.ended += 1
            self.gone.add(job_id)

    def _hold_released(self, sender, job, **kwargs) -> None:
        if (run := self.runs.pop(job.pk, None)) is not None:
            run.slots.clear()  # the job ended: its shards are as the lifecycle left them
            self.unsettled.discard(run)
        for slot in self.slots.values():
            if slot.job_id == job.pk:
                self._stop_serving(slot)
                slot.job, slot.job_id, slot.leaving = None, None, False
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
            "deadline_jobs": len(with_deadline),
            "deadlines_told_infeasible": len(told) if with_deadline else None,
            "deadlines_missed_not_told": sum(not job.met and job.feasible is not False for job in with_deadline)
            if with_deadline
            else None,
            "deadlines_missed_how": _missed(with_deadline) if with_deadline else None,
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


def _missed(with_deadline: list["Outcome"]) -> dict[str, int]:
    """How the deadline jobs told theirs could be met missed it, by how each ended: `late` (succeeded after it),
    `never_held` (ended unheld at it), `timed_out_at_deadline` (cut at it), `timed_out_hours_spent` (its budget
    spent before it), or its state."""
    how: dict[str, int] = {}
    for job in with_deadline:
        if not job.met and job.feasible is not False:
            key = "late" if job.state == "succeeded" else "never_held" if job.started is None else job.state
            if key == "timed_out":
                key += "_at_deadline" if job.ended >= job.ask.deadline else "_hours_spent"
            how[key] = how.get(key, 0) + 1
    return how


def _seconds(at: datetime | None) -> float | None:
    return None if at is None else (at - BEGIN).total_seconds()


def _round(value: float) -> float:
    return round(value, 4)


if __name__ == "__main__":
    main()
