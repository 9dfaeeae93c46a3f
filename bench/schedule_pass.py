"""One scheduling pass over a long queue (issue 16): its time and its queries, at each queue length.

    .venv/bin/python bench/schedule_pass.py [--queued 100,1000,10000] [--gpus 1000] [--rounds 5] [--history 0]

Seeds, into the configured database (DATABASE_URL; PostgreSQL for the figures in
docs/benchmarks.md), `--gpus` online GPUs on nodes of 8, a few running jobs holding all but 16 of
them, and the longest queue asked for (jobs of 1 to 8 GPUs); a shorter queue is the same one with
its tail cut off (its jobs put back to staging). `--history N` adds N holds that ended over the last
30 days, of 100 ended jobs: the ledger's past, which the fair share reads (its decayed usage). Each
pass runs in a transaction that is rolled back, so every pass sees the same queue: it starts the
jobs at the head that fit and stops at the first that does not. Prints the median of `--rounds`
passes, the queries of one, and how the time at the longest queue compares with the shortest (1.0:
constant in the queue's length). Then the queue's figures (jobs/queue_figures.py, in the configured
Redis): the time to work them out and store them for the whole queue, and to read the last job's
against counting them for it alone. What it seeded is deleted at the end. Give it a database of its
own: it marks every other slot offline.
"""

import argparse
import logging
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from jobs import processors, scheduling  # noqa: E402
from jobs import queue_figures as stored_figures  # noqa: E402
from jobs.models import Allocation, Gpu, Job, Node, State, UsageHour  # noqa: E402
from portal.models import Organisation  # noqa: E402

FREE = 16  # GPUs left free by the running jobs
NAME = "bench-schedule-pass"


class RolledBack(Exception):
    pass


def seed(queued: int, gpus: int) -> list[Job]:
    now = timezone.now()
    kinds = [processor.name for processor in processors.available()]
    organisation = Organisation.objects.create(name=NAME, slug=NAME)
    nodes = Node.objects.bulk_create(
        Node(name=f"{NAME}-{n}", hostname="bench", last_seen=now, work_kinds=kinds) for n in range((gpus + 7) // 8)
    )
    slots = Gpu.objects.bulk_create(
        Gpu(node=nodes[i // 8], index=i % 8, kind=Gpu.Kind.GPU, name="bench", queue=f"{NAME}.{i}", last_seen=now)
        for i in range(gpus)
    )
    job = {"organisation": organisation, "work": "clean-table", "params": {}, "source_name": "a.csv", "hours": 2}
    held = slots[: gpus - FREE]
    running = Job.objects.bulk_create(
        Job(**job, gpus=len(part), state=State.RUNNING, started_at=now, queued_at=now - timedelta(days=1))
        for part in (held[i : i + 8] for i in range(0, len(held), 8))
    )
    Allocation.objects.bulk_create(
        Allocation(job=holder, gpu=slot, held_from=now)
        for holder, part in zip(running, (held[i : i + 8] for i in range(0, len(held), 8)), strict=True)
        for slot in part
    )
    draw = random.Random(16)
    return Job.objects.bulk_create(
        Job(**job, gpus=draw.randint(1, 8), state=State.QUEUED, queued_at=now + timedelta(microseconds=n))
        for n in range(queued)
    )


def seed_history(holds: int, gpus: int) -> None:
    """`holds` ended holds of 100 ended jobs, each of an hour or less, ending at random over the last 30 days."""
    if not holds:
        return
    now = timezone.now()
    organisation = Organisation.objects.get(slug=NAME)
    slots = list(Gpu.objects.filter(node__name__startswith=NAME)[:gpus])
    ended = Job.objects.bulk_create(
        Job(organisation=organisation, work="clean-table", params={}, source_name="a.csv", hours=1, gpus=8,
            state=State.SUCCEEDED, queued_at=now - timedelta(days=31))
        for _ in range(100)
    )  # fmt: skip
    draw = random.Random(30)
    for start in range(0, holds, 10_000):
        batch = []
        for n in range(start, min(holds, start + 10_000)):
            end = now - timedelta(seconds=draw.uniform(60, 30 * 86400))
            batch.append(
                Allocation(job=ended[n % 100], gpu=slots[n % len(slots)],
                           held_from=end - timedelta(seconds=draw.uniform(30, 3600)), held_to=end)
            )  # fmt: skip
        Allocation.objects.bulk_create(batch)
    UsageHour.add(Allocation.objects.filter(job__in=ended))  # as lifecycle rolls up each hold as it ends


def beat() -> None:
    """The seeded nodes' heartbeats: seeding a long history takes longer than a node stays online unheard."""
    now = timezone.now()
    Node.objects.filter(name__startswith=NAME).update(last_seen=now)
    Gpu.objects.filter(node__name__startswith=NAME).update(last_seen=now)


def tidy() -> None:
    """What autovacuum does between passes in a running portal: the dead rows of the seeding and of
    the rolled-back passes gone, the planner's figures made."""
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")


def one_pass() -> tuple[float, int, int]:
    """Seconds, queries, and jobs started, of one pass that is then rolled back."""
    try:
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            began = time.perf_counter()
            started = scheduling.schedule()
            seconds = time.perf_counter() - began
            raise RolledBack
    except RolledBack:
        return seconds, len(queries), len(started)


def figures(last: Job, rounds: int) -> str:
    """The queue's figures: worked out and stored for the whole queue, as the schedule task does after
    a change; then the last job's read from the store, and counted for it alone (the reference)."""
    stored = statistics.median(_timed(lambda: stored_figures.write(scheduling.queue_figures(), timezone.now()))
                               for _ in range(rounds))  # fmt: skip
    last = Job.objects.get(pk=last.pk)
    read = statistics.median(_timed(lambda: stored_figures.read(last)) for _ in range(rounds))
    counted = statistics.median(_timed(lambda: scheduling.figures_of(last)) for _ in range(rounds))
    place = stored_figures.read(last).place
    return (
        f"figures stored for the whole queue {stored * 1000:.1f} ms; the job at place {place}: "
        f"read {read * 1000:.2f} ms, counted alone {counted * 1000:.1f} ms"
    )


def _timed(call) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", default="100,1000,10000")
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--history", type=int, default=0, help="ended holds in the ledger's past (default 0)")
    args = parser.parse_args()
    logging.getLogger("jobs.scheduling").setLevel(logging.WARNING)
    lengths = sorted(int(n) for n in args.queued.split(","))
    Gpu.objects.update(last_seen=None)  # only the seeded fleet is online
    queue = seed(lengths[-1], args.gpus)
    seed_history(args.history, args.gpus)
    tidy()
    print(f"{connection.vendor}, {args.gpus} GPUs ({FREE} free), {args.history} ended holds, "
          f"median of {args.rounds} passes")  # fmt: skip
    times = {}
    try:
        for length in lengths:
            Job.objects.filter(pk__in=[job.pk for job in queue[length:]]).update(state=State.STAGING)
            Job.objects.filter(pk__in=[job.pk for job in queue[:length]]).update(state=State.QUEUED)
            tidy()
            beat()
            one_pass()  # warm: the first pass pays for imports and connections
            passes = [one_pass() for _ in range(args.rounds)]
            times[length] = statistics.median(seconds for seconds, _, _ in passes)
            _, queries, started = passes[0]
            print(f"{length:>7} queued: {times[length] * 1000:8.1f} ms, {queries} queries, {started} jobs started")
            print(f"{'':>15} {figures(queue[length - 1], args.rounds)}")
        print(f"time at {lengths[-1]} queued / at {lengths[0]}: {times[lengths[-1]] / times[lengths[0]]:.2f}")
    finally:
        Organisation.objects.filter(slug=NAME).delete()
        Node.objects.filter(name__startswith=NAME).delete()


if __name__ == "__main__":
    main()
