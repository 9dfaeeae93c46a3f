"""Staging that streams into the pass (issue 40): one job three ways, on the real stack.

    .venv/bin/python bench/stream.py [--records 200000] [--rate-mb 0] [--slots 2] [--batch-seconds 0.05]

A local HTTP server sends a generated CSV at a throttled rate (--rate-mb MB/s; 0: the rate at which
staging alone takes about as long as the pass alone, measured first). The same job then runs:
1. staging alone: the job staged whole first (E31_STREAM_STAGING off), its `staging_seconds`;
2. the pass alone, on data already staged (served unthrottled, so staging is a moment), from its first
   hold to its last shard;
3. the whole job from submit, staging streaming into the pass.

The work is test-slow-echo (tests/plugin_path), whose pass rate is its sleep per batch: it holds no CPU
while it "computes", so on this 2-core machine the pass does not take the staging's CPU as a real
GPU pass would not, and staging and the pass can be made to take the times chosen.

The last line is one JSON object: `staging_s`, `pass_s`, `total_s` (submit to succeeded, the third run),
`ratio` (total / max(staging, pass); target ≤ 1.15), `first_output_s` (submit to the first shard done),
`unserved_waiting_s` (slot-seconds held while the slot ran no shard and the job waited for bytes: every
hold's time minus the time its slot ran shards), `held_slot_s` and `records_exact` (every record in the
output once).
"""

import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import scratch

ARGS = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ARGS.add_argument("--records", type=int, default=200_000)
ARGS.add_argument("--rate-mb", type=float, default=0.0, help="the server's rate, MB/s (0: staging ≈ the pass)")
ARGS.add_argument("--slots", type=int, default=2)
ARGS.add_argument("--batch-seconds", type=float, default=0.05, help="test-slow-echo's sleep per batch of 50")
ARGS = ARGS.parse_args()

PLUGINS = str(scratch.ROOT / "tests" / "plugin_path")
REDIS_SOCKET = scratch.SCRATCH / "stream-redis.sock"
environment = {
    "E31_LOG_LEVEL": "WARNING",
    "E31_STAGING_ALLOWED_HOSTS": "localhost",
    "REDIS_URL": f"unix://{REDIS_SOCKET}",
    "PYTHONPATH": os.pathsep.join(filter(None, [PLUGINS, os.environ.get("PYTHONPATH")])),
}
scratch.setup(**environment)
sys.path.insert(0, PLUGINS)

import django  # noqa: E402

django.setup()

import pyarrow.parquet as pq  # noqa: E402
from django.core.files.storage import default_storage  # noqa: E402
from django.core.management import call_command  # noqa: E402

from jobs import services  # noqa: E402
from jobs.models import Allocation, Gpu, Job, Shard, State  # noqa: E402
from jobs.spec import Data, JobSpec, Request, Work  # noqa: E402
from portal import embedded_redis  # noqa: E402
from portal.models import Organisation  # noqa: E402

DATA = b"n,text\n" + b"".join(b"%d,record number %d of the dataset\n" % (n, n) for n in range(1, ARGS.records + 1))


class Throttled(http.server.BaseHTTPRequestHandler):
    """DATA at `rate` bytes a second (None: as fast as it goes), in 64 KiB pieces, on one connection: it takes
    no ranges (the whole file to any GET), so the rate is the wire's, not one of several connections'."""

    rate: float | None = None

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(DATA)))
        self.end_headers()
        began, sent = time.monotonic(), 0
        for at in range(0, len(DATA), 65536):
            piece = DATA[at : at + 65536]
            self.wfile.write(piece)
            sent += len(piece)
            if self.rate and (ahead := sent / self.rate - (time.monotonic() - began)) > 0:
                time.sleep(ahead)

    def log_message(self, *args):
        return


def start_redis() -> subprocess.Popen:
    data = scratch.SCRATCH / "stream-redis"
    data.mkdir(exist_ok=True)
    redis = subprocess.Popen(embedded_redis.server_argv(REDIS_SOCKET, data), stdout=subprocess.DEVNULL)
    embedded_redis.wait_until_ready(REDIS_SOCKET)
    call_command("migrate", verbosity=0)
    return redis


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    process.wait(60)


def run(url: str, streaming: bool) -> Job:
    """Submit the job to a fresh gpuworker whose staging streams into the pass or not; wait for its end."""
    argv = [sys.executable, str(scratch.ROOT / "manage.py"), "gpuworker", "--name", "stream", "--cpu-slots"]
    log = (scratch.SCRATCH / "stream-worker.log").open("ab")
    env = {**os.environ, "E31_STREAM_STAGING": str(streaming).lower()}
    worker = subprocess.Popen([*argv, str(ARGS.slots)], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        Gpu.objects.update(last_seen=None)  # the last run's slots are gone with their worker
        while Gpu.objects.online().filter(node__name="stream").count() < ARGS.slots:
            time.sleep(0.2)
        return _run(url)
    finally:
        stop(worker)


def _run(url: str) -> Job:
    organisation, _ = Organisation.objects.get_or_create(slug="bench-stream", defaults={"name": "Bench stream"})
    params = {"seconds_per_batch": ARGS.batch_seconds}
    spec = JobSpec(Work("test-slow-echo", params), Data(locations=[url]), Request(ARGS.slots, 4, kind="flexible"))
    job = services.submit_job(organisation, None, spec)
    while not Job.objects.get(pk=job.pk).ended:
        time.sleep(0.1)
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED, job.error
    return job


def pass_seconds(job: Job) -> float:
    first = Allocation.objects.filter(job=job).order_by("held_from").first().held_from
    last = Shard.objects.filter(job=job).order_by("-finished_at").first().finished_at
    return (last - first).total_seconds()


def unserved(job: Job) -> tuple[float, float]:
    """Slot-seconds held, and held while the slot ran none of the job's shards."""
    held = busy = 0.0
    for hold in Allocation.objects.filter(job=job):
        held += (hold.held_to - hold.held_from).total_seconds()
        shards = Shard.objects.filter(job=job, gpu=hold.gpu_id)
        for started, finished in shards.values_list("started_at", "finished_at"):
            begin, end = max(started, hold.held_from), min(finished, hold.held_to)
            busy += max(0.0, (end - begin).total_seconds())
    return held, held - busy


def timeline(job: Job) -> None:
    """The whole run's holds and shards, in seconds from submit, on stderr: where a ratio above 1 comes from."""

    def at(moment) -> str:
        return f"{(moment - job.created).total_seconds():6.1f}"

    for hold in Allocation.objects.filter(job=job).order_by("held_from"):
        print(f"hold  slot {hold.gpu_id}: {at(hold.held_from)} – {at(hold.held_to)}", file=sys.stderr)
    for shard in Shard.objects.filter(job=job).order_by("index"):
        span = f"{at(shard.started_at)} – {at(shard.finished_at)}" if shard.started_at else "not run"
        records = f"({shard.record_count:6} records)"
        print(f"shard {shard.index:3} {records} cut {at(shard.created)}, ran {span} on {shard.gpu_id}", file=sys.stderr)
    print(
        f"staging ended {job.staging_seconds or 0:.1f} s after it began; job ended {at(job.ended_at)}", file=sys.stderr
    )


def exact(job: Job) -> bool:
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        numbers = pq.read_table(output, columns=["n"]).column("n").to_pylist()
    return sorted(int(n) for n in numbers) == list(range(1, ARGS.records + 1))


def main() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Throttled)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://localhost:{server.server_address[1]}/data.csv"
    redis = start_redis()
    try:
        alone = run(url, streaming=False)  # unthrottled: the pass alone, on data staged in a moment
        pass_s = pass_seconds(alone)
        Throttled.rate = ARGS.rate_mb * 1e6 if ARGS.rate_mb else len(DATA) / pass_s
        print(f"pass alone {pass_s:.1f} s; serving at {Throttled.rate / 1e6:.2f} MB/s", file=sys.stderr)
        staged = run(url, streaming=False)
        staging_s = staged.staging_seconds
        print(f"staging alone {staging_s:.1f} s", file=sys.stderr)
        whole = run(url, streaming=True)
        total_s = (whole.ended_at - whole.created).total_seconds()
        first = Shard.objects.filter(job=whole).order_by("finished_at").first().finished_at
        held, waiting = unserved(whole)
        timeline(whole)
        figures = {
            "staging_s": round(staging_s, 2),
            "pass_s": round(pass_s, 2),
            "total_s": round(total_s, 2),
            "ratio": round(total_s / max(staging_s, pass_s), 3),
            "first_output_s": round((first - whole.created).total_seconds(), 2),
            "unserved_waiting_s": round(waiting, 2),
            "held_slot_s": round(held, 2),
            "holds": Allocation.objects.filter(job=whole).count(),
            "mb_per_s": round(Throttled.rate / 1e6, 3),
            "records_exact": exact(whole),
        }
    finally:
        stop(redis)
        server.shutdown()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
