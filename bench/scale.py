"""The portal at fleet scale (issue 16): 100,000 jobs, 10,001 of them queued, 179 running on 1,000 GPUs of 125
nodes, and 20,000 ledger entries of one organisation, seeded once into the configured database with bulk_create
(ledger entries through LedgerEntry.objects.append, which seals each). Then it measures

- a scheduling pass (jobs.scheduling.schedule) and its queries at Q queued × G online GPUs, Q ∈ {100, 1k, 10k},
  G ∈ {8, 128, 1000}, a tenth of the G free; each pass is rolled back, so every one sees the same world;
- a queued job's progress fragment per poll at places 10, 1,000 and 10,000, at the URL its page polls
  (/jobs/<id>/progress/?shown=<state>: the status card only, as long as the state is the one shown);
- the operators' queue page, the ledger page (and its CSV export: first byte, all of it, peak memory), and the
  jobs page of the organisation with the ledger, through Django's test client;
- a load test on one gunicorn server as `make serve` starts it (gunicorn.conf.py, 2 workers): the running job's
  progress fragment as its page polls it against a minimal logged-in page (/accounts/password_change/), in
  --rounds interleaved rounds of --seconds a side with --clients threads on keep-alive connections, and their
  ratio. --only measures some of these.

    createdb -h 127.0.0.1 -U postgres e31_scale
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/e31_scale .venv/bin/python bench/scale.py

Without DATABASE_URL it seeds a SQLite file in a scratch folder. The world is seeded once per database (its
organisation "Scale Lab" marks it); the measurements change nothing in it.
"""

import argparse
import html
import http.client
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from datetime import timedelta
from decimal import Decimal

import scratch

DATABASE_URL = os.environ.get("DATABASE_URL")
# A node seen once stays online for the whole run: the bench seeds heartbeats, it does not send them.
SETTINGS = {"E31_NODE_TIMEOUT_SECONDS": "864000", "E31_DB_CONN_MAX_AGE": "60", "E31_LOG_LEVEL": "WARNING"}
scratch.setup(**SETTINGS, **({"DATABASE_URL": DATABASE_URL} if DATABASE_URL else {}))

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from billing.models import LedgerEntry, RateCard  # noqa: E402
from jobs import processors, scheduling  # noqa: E402
from jobs.models import ENDED, Allocation, Gpu, Job, Node, Shard, State  # noqa: E402
from portal.models import Membership, Organisation  # noqa: E402

JOBS, QUEUED, RUNNING, NODES, SLOTS_PER_NODE, LEDGER_JOBS = 100_000, 10_001, 179, 125, 8, 10_000
ORGANISATIONS = 20
BIG = "scale-lab"  # the organisation with the ledger and the long job list
BATCH = 2_000
PARTS = ["fragments", "pages", "load", "passes"]


def _rng() -> random.Random:
    return random.Random(16)


def seed() -> None:
    """The world of issue 16, once: a second run finds it and measures it again."""
    call_command("migrate", verbosity=0)
    if Organisation.objects.filter(slug=BIG).exists():
        if LedgerEntry.objects.filter(organisation__slug=BIG).count() < 2 * LEDGER_JOBS:
            raise SystemExit("A seeding of this database was interrupted: drop it, create it again and rerun.")
        return
    began = time.perf_counter()
    now = timezone.now()
    rng = _rng()
    RateCard.objects.create(rate_per_gpu_hour=Decimal("2.50"), effective_from=now - timedelta(days=400))
    organisations = Organisation.objects.bulk_create(
        [Organisation(name="Scale Lab", slug=BIG)]
        + [Organisation(name=f"Lab {n}", slug=f"lab-{n}") for n in range(1, ORGANISATIONS)]
    )
    users = User.objects.bulk_create([User(username=f"member-{o.slug}", password="!") for o in organisations])
    Membership.objects.bulk_create(
        [Membership(user=u, organisation=o) for u, o in zip(users, organisations, strict=True)]
    )
    User.objects.create(username="operator", password="!", is_staff=True, is_superuser=True)
    kinds = [processor.name for processor in processors.available() if not processor.missing()]
    nodes = Node.objects.bulk_create(
        [Node(name=f"node-{n:03d}", hostname=f"gpu{n:03d}", last_seen=now, work_kinds=kinds) for n in range(NODES)]
    )
    gpus = Gpu.objects.bulk_create(
        [
            Gpu(node=node, index=i, kind=Gpu.Kind.GPU, name="NVIDIA H100", queue=f"slot.{node.name}.{i}", last_seen=now)
            for node in nodes
            for i in range(SLOTS_PER_NODE)
        ]
    )
    params = processors.get("clean-table").validate_params({})
    active = RUNNING + QUEUED + 20
    first_active = JOBS - active
    jobs = []
    for n in range(JOBS):
        organisation = organisations[0] if n % 7 == 0 else organisations[1 + n % (ORGANISATIONS - 1)]
        created = now - timedelta(minutes=JOBS - n)
        job = Job(
            organisation=organisation, work="clean-table", params=params, source_name=f"part-{n:06d}.csv",
            gpus=rng.randint(1, 8), hours=Decimal(rng.randint(1, 8)), created=created, records_total=1_000_000,
            input_bytes=64 * 1024**2,
        )  # fmt: skip
        if n < first_active:
            job.state = rng.choices([State.SUCCEEDED, State.FAILED, State.CANCELLED], [85, 10, 5])[0]
            job.queued_at, job.started_at = created + timedelta(minutes=1), created + timedelta(minutes=2)
            job.ended_at = created + timedelta(minutes=30)
        elif n < first_active + RUNNING:
            job.state, job.gpus, job.hours = State.RUNNING, 5, Decimal(48)
            job.queued_at, job.started_at = created, now - timedelta(hours=1)
        elif n < first_active + RUNNING + QUEUED:
            job.state, job.queued_at = State.QUEUED, created
        else:
            job.state = State.STAGING if n % 4 else State.SUBMITTED
        jobs.append(job)
    jobs = Job.objects.bulk_create(jobs, batch_size=BATCH)
    allocations, shards, free = [], [], iter(gpus)
    for job in jobs:
        if job.state == State.RUNNING:
            taken = [next(free) for _ in range(job.gpus)]
            allocations += [Allocation(job=job, gpu=gpu, held_from=job.started_at) for gpu in taken]
            shards += [
                Shard(
                    job=job,
                    index=i,
                    first_record=1 + i * 25_000,
                    record_count=25_000,
                    first_line=2 + i * 25_000,
                    start_byte=i * 1_600_000,
                    end_byte=(i + 1) * 1_600_000,
                    status=Shard.Status.DONE if i < 15 else Shard.Status.PENDING,
                    records_out=25_000 if i < 15 else None,
                )
                for i in range(40)
            ]
        elif job.state in ENDED:
            gpu = gpus[job.pk % len(gpus)]
            allocations.append(Allocation(job=job, gpu=gpu, held_from=job.started_at, held_to=job.ended_at))
    Allocation.objects.bulk_create(allocations, batch_size=BATCH)
    Shard.objects.bulk_create(shards, batch_size=BATCH)
    _seed_ledger([job for job in jobs if job.organisation_id == organisations[0].pk and job.state in ENDED])
    print(f"seeded {Job.objects.count():,} jobs, {Allocation.objects.count():,} allocations, "
          f"{LedgerEntry.objects.count():,} ledger entries in {time.perf_counter() - began:.0f} s")  # fmt: skip


def _seed_ledger(ended: list[Job]) -> None:
    """Two entries per job (its staging and its hold), appended and sealed one at a time as the meter does."""
    for start in range(0, LEDGER_JOBS, 500):
        with transaction.atomic():
            for job in ended[start : min(start + 500, LEDGER_JOBS)]:
                staged = job.started_at - timedelta(seconds=40)
                LedgerEntry.objects.append(
                    organisation_id=job.organisation_id, job=job, kind=LedgerEntry.Kind.STAGING, gpus=0,
                    held_from=staged, held_to=staged + timedelta(seconds=30), seconds=30, bytes=job.input_bytes,
                    source_kind=Job.Source.UPLOAD, gpu_hours=Decimal(0), rate=Decimal(0), currency="USD",
                    amount=Decimal(0),
                )  # fmt: skip
                gpu_hours = Decimal(job.gpus * 1680) / 3600
                LedgerEntry.objects.append(
                    organisation_id=job.organisation_id, job=job, kind=LedgerEntry.Kind.HOLD, gpus=job.gpus,
                    held_from=job.started_at, held_to=job.ended_at, seconds=1680,
                    gpu_hours=gpu_hours.quantize(Decimal("0.000001")), rate=Decimal("2.5"), currency="USD",
                    amount=(gpu_hours * Decimal("2.5")).quantize(Decimal("0.0001")),
                )  # fmt: skip


def tidy() -> None:
    """Fresh planner statistics, and no dead rows left by the rolled-back passes of an earlier run."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")


def _timed(call, repeat: int) -> tuple[float, int, object]:
    """The median milliseconds of `repeat` calls, the queries of the last, and its result."""
    times = []
    for _ in range(repeat):
        connection.queries_log.clear()  # the log keeps 9,000 queries, and the count is its growth
        with CaptureQueriesContext(connection) as queries:
            began = time.perf_counter()
            result = call()
            times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), len(queries), result


def _online(count: int) -> None:
    """`count` GPUs online, a tenth of them (at least one) free: the rest are held by the running jobs."""
    held = list(Allocation.objects.filter(held_to=None).order_by("gpu_id").values_list("gpu_id", flat=True))
    free = list(Gpu.objects.exclude(pk__in=held).order_by("pk").values_list("pk", flat=True))
    spare = max(1, count // 10)
    chosen = held[: count - spare] + free[:spare]
    Gpu.objects.update(last_seen=None)
    Gpu.objects.filter(pk__in=chosen).update(last_seen=timezone.now())


def scheduling_passes(repeat: int) -> None:
    print("\nscheduling pass (jobs.scheduling.schedule, rolled back): median ms, queries, jobs started")
    queue = list(scheduling.queue().values_list("pk", flat=True))
    for gpus in (8, 128, 1000):
        _online(gpus)
        for length in (100, 1_000, 10_000):

            def one_pass(length=length):
                with transaction.atomic():
                    # The queue past `length` is set aside for this pass only (staging), then rolled back.
                    Job.objects.filter(pk__in=queue[length:]).update(state=State.STAGING)
                    connection.queries_log.clear()
                    with CaptureQueriesContext(connection) as queries:
                        began = time.perf_counter()
                        started = scheduling.schedule()
                        took = (time.perf_counter() - began) * 1000
                    transaction.set_rollback(True)
                return took, len(queries), len(started)

            runs = [one_pass() for _ in range(repeat)]
            took = statistics.median(run[0] for run in runs)
            print(f"  Q={length:>6,} G={gpus:>5,}: {took:8.1f} ms {runs[-1][1]:4d} queries, started {runs[-1][2]}")
    _online(NODES * SLOTS_PER_NODE)


def _client(user: User) -> Client:
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    return client


def _member_of(job: Job) -> User:
    return User.objects.get(membership__organisation=job.organisation_id)


def _polled(client: Client, job: Job) -> str:
    """The fragment's URL as the job's page polls it: it says the state shown, so only the status card comes."""
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    return html.unescape(re.search(r'<div id="progress" hx-get="([^"]+)"', page)[1])


def fragments(repeat: int) -> None:
    print("\nprogress fragment of a queued job, per poll as its page polls it: median ms, queries, bytes")
    queue = list(scheduling.queue().values_list("pk", flat=True))
    for place in (10, 1_000, 10_000):
        job = Job.objects.get(pk=queue[place - 1])
        client = _client(_member_of(job))
        polled = _polled(client, job)
        took, queries, response = _timed(
            lambda client=client, path=polled: client.get(path, HTTP_HX_REQUEST="true"), repeat
        )
        assert response.status_code == 200, response.status_code
        print(f"  place {place:>6,}: {took:8.1f} ms {queries:4d} queries {len(response.content):8,} B")


def pages(repeat: int) -> None:
    print("\npages: median ms, queries, bytes")
    operator = User.objects.get(username="operator")
    big = Organisation.objects.get(slug=BIG)
    member = User.objects.get(membership__organisation=big)
    newest = LedgerEntry.objects.filter(organisation=big).latest("held_to").held_to
    checks = [
        ("queue console", operator, "/admin/jobs/job/queue/", {}),
        ("queue console, its fragment", operator, "/admin/jobs/job/queue/", {"HTTP_HX_REQUEST": "true"}),
        ("queue console, page 200", operator, "/admin/jobs/job/queue/?page=200", {}),
        ("ledger page", member, "/billing/ledger/", {}),
        ("ledger page, page 400", member, "/billing/ledger/?page=400", {}),
        ("ledger page, one month", member, f"/billing/ledger/?month={newest:%Y-%m}", {}),
        ("jobs page", member, "/jobs/", {}),
        ("jobs page, page 250", member, "/jobs/?page=250", {}),
        ("jobs page, succeeded", member, "/jobs/?state=succeeded", {}),
        ("jobs page, search", member, "/jobs/?q=part-0999", {}),
    ]
    for name, user, path, headers in checks:
        client = _client(user)
        took, queries, response = _timed(
            lambda client=client, path=path, headers=headers: client.get(path, **headers), repeat
        )
        assert response.status_code == 200, (path, response.status_code)
        print(f"  {name:<30} {took:8.1f} ms {queries:4d} queries {len(response.content):10,} B")
    head = list(scheduling.queue()[:50])[-1]
    took, queries, _ = _timed(lambda: scheduling.latest_starts(until=head), repeat)
    print(f"  {'of which latest starts to 50':<30} {took:8.1f} ms {queries:4d} queries (the scheduler's code)")
    print(f"  of {Job.objects.filter(organisation=big).count():,} jobs and "
          f"{LedgerEntry.objects.filter(organisation=big).count():,} ledger entries of {big.name}")  # fmt: skip
    export(_client(member))


def _stream(client: Client, path: str) -> tuple[float, float, float, int, int]:
    """Milliseconds to a streamed answer's first chunk, its second (the first row), its end; its chunks and bytes."""
    began = time.perf_counter()
    chunks = iter(client.get(path).streaming_content)
    size = len(next(chunks))
    first = time.perf_counter()
    size += len(next(chunks))
    row = time.perf_counter()
    count = 2
    for chunk in chunks:
        size += len(chunk)
        count += 1
    return first - began, row - began, time.perf_counter() - began, count, size


def export(client: Client) -> None:
    """The ledger's CSV: time to its first byte, its first row and its end; then, in a second download, the
    most memory Python held meanwhile (tracemalloc slows Python down, so not while timing)."""
    first, row, took, chunks, size = _stream(client, "/billing/ledger.csv")
    tracemalloc.start()
    _stream(client, "/billing/ledger.csv")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"  ledger CSV export: first byte {first * 1000:.1f} ms, first row {row * 1000:.1f} ms, {chunks - 1:,} rows "
          f"({size / 1e6:.1f} MB) in {took * 1000:.0f} ms, peak Python memory {peak / 1e6:.1f} MB")  # fmt: skip


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_listening(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("gunicorn did not start")
        time.sleep(0.1)


def _load(port: int, path: str, headers: dict, clients: int, seconds: float) -> tuple[float, float]:
    """Requests per second and the median latency in ms of `clients` threads asking for `path` for `seconds`."""
    latencies: list[float] = []
    failures: list[int] = []
    stop_at = time.monotonic() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < stop_at:
            began = time.perf_counter()
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                failures.append(response.status)
            latencies.append((time.perf_counter() - began) * 1000)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{path}: {len(failures)} answers not 200, e.g. {failures[0]}")
    return len(latencies) / (time.monotonic() - began), statistics.median(latencies)


def load_test(clients: int, seconds: float, rounds: int) -> None:
    """The two sides in interleaved rounds, each round in the other order than the one before, so that
    what else the machine does weighs on both alike: each round's ratio, and their median."""
    running = Job.objects.filter(state=State.RUNNING).order_by("pk").first()
    client = _client(_member_of(running))
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    port = _free_port()
    env = {**os.environ, "PORT": str(port), "E31_WEB_WORKERS": "2", "E31_LOG_LEVEL": "WARNING"}
    command = [sys.executable, "-m", "gunicorn", "--config", "gunicorn.conf.py"]
    server = subprocess.Popen(command, cwd=scratch.ROOT, env=env, start_new_session=True)
    try:
        _wait_until_listening(port, server)
        print(f"\nload test: gunicorn.conf.py with 2 workers × {os.environ.get('E31_WEB_THREADS', '4')} threads, "
              f"{clients} clients, {rounds} rounds of {seconds:.0f} s a side")  # fmt: skip
        sides = {
            "minimal logged-in page": ("/accounts/password_change/", {"Cookie": cookie}),
            "running job's fragment": (_polled(client, running), {"Cookie": cookie, "HX-Request": "true"}),
        }
        for path, headers in sides.values():
            _load(port, path, headers, clients, 1)  # each worker's first requests warm it
        ratios = []
        for round_ in range(rounds):
            rates = {}
            for name in sides if round_ % 2 == 0 else reversed(sides):
                path, headers = sides[name]
                rate, median = _load(port, path, headers, clients, seconds)
                rates[name] = rate
                print(f"  round {round_ + 1}: {name:<24} {path:<32} {rate:8.1f} req/s, median {median:6.1f} ms")
            ratios.append(rates["running job's fragment"] / rates["minimal logged-in page"])
        print(f"  ratio fragment / minimal page: median {statistics.median(ratios):.2f} "
              f"(rounds: {', '.join(f'{ratio:.2f}' for ratio in ratios)})")  # fmt: skip
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each measurement (the median is shown)")
    parser.add_argument("--clients", type=int, default=8, help="threads of the load test")
    parser.add_argument("--seconds", type=float, default=5, help="how long each side of a load test round runs")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds of the load test")
    parser.add_argument("--only", choices=PARTS, nargs="+", default=PARTS, help="measure only these")
    args = parser.parse_args()
    print(f"database: {connection.vendor} {settings.DATABASES['default']['NAME']}")
    seed()
    tidy()
    with scratch.embedded_broker():  # the queue's figures are kept in Redis, as in production
        began = time.perf_counter()
        scheduling.refresh_queue_figures()
        print(f"the whole queue's figures worked out and stored: {(time.perf_counter() - began) * 1000:.0f} ms")
        if "fragments" in args.only:
            fragments(args.repeat)
        if "pages" in args.only:
            pages(args.repeat)
        if "load" in args.only:
            load_test(args.clients, args.seconds, args.rounds)
        # Last: each pass is rolled back, and on PostgreSQL the rows it set aside stay behind as dead tuples in
        # the job table's indexes until a vacuum, which would slow what is measured after it.
        if "passes" in args.only:
            scheduling_passes(args.repeat)


if __name__ == "__main__":
    main()
