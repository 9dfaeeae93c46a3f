"""What the tests share besides fixtures: waiting on a condition, the processes they start (a
gpuworker, manage.py), a logged-in client, the job form's fields, a job submitted through the service,
an action in the jobs' admin, moto's S3 server, the ledger opened for the flush, the browser's upload
status. Fixtures live in conftest.py and use these."""

import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections, transaction
from django.db.models import AutoField
from django.test import Client
from moto.server import ThreadedMotoServer

from jobs import services
from jobs.models import ENDED, Gpu, Job
from jobs.spec import Data, JobSpec, NamedFile, Request, Work
from portal.celery import app as celery_app
from tests.datasets import csv_bytes
from tests.settings import PLUGIN_PATH, ROOT

EXAMPLE = ROOT / "examples" / "customers.csv"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# CI runs the suite twice (.ci/run); its embedded run leaves the browser and model tests, which test pages
# and models rather than the database or the broker, to its PostgreSQL run by setting this.
ELSEWHERE = bool(os.environ.get("E31_BROWSER_AND_MODEL_TESTS_ELSEWHERE"))
ELSEWHERE_REASON = "E31_BROWSER_AND_MODEL_TESTS_ELSEWHERE: CI's PostgreSQL run has this test"

# A browser test runs where chromium is, and wherever E31_BROWSER_TESTS says it must (CI), where a missing
# chromium fails it rather than skipping it.
needs_chromium = pytest.mark.skipif(
    ELSEWHERE or (not CHROMIUM and not os.environ.get("E31_BROWSER_TESTS")),
    reason=ELSEWHERE_REASON if ELSEWHERE else "no chromium here (apt install chromium); CI runs this test",
)


# The skips of needs_libraries_of, by which the tests that run a model are marked `model` (tests/conftest.py).
MODEL_SKIPS: list[pytest.Mark] = []


def needs_libraries_of(processor) -> pytest.MarkDecorator:
    """Skip where the libraries the work kind runs (torch and the like, requirements-gpu.txt) are not installed;
    CI installs them and sets E31_GPU_DEPS_TESTS, so there the test runs, and fails if they are missing."""
    missing = processor.missing()
    skip = pytest.mark.skipif(
        ELSEWHERE or (bool(missing) and not os.environ.get("E31_GPU_DEPS_TESTS")),
        reason=ELSEWHERE_REASON
        if ELSEWHERE
        else f"no {', '.join(missing)} here (make gpu-deps installs requirements-gpu.txt); CI runs this test",
    )
    MODEL_SKIPS.append(skip.mark)
    return skip


@contextlib.contextmanager
def ledger_open_for_flush() -> Iterator[None]:
    """The flush may empty the append-only ledger, and only it: in one transaction with the flush, the
    ledger's triggers are disabled (PostgreSQL) or dropped and created again as stored (SQLite). DDL is
    transactional on both, so no other connection sees the ledger without them (billing 0008)."""
    connection, table = connections["default"], "billing_ledgerentry"
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            yield
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
            return
        cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [table])
        triggers = cursor.fetchall()
        for name, _ in triggers:
            cursor.execute(f'DROP TRIGGER "{name}"')
        yield
        for _, sql in triggers:
            cursor.execute(sql)


@contextlib.contextmanager
def s3_on_loopback() -> Iterator[tuple[str, Any]]:
    """moto's S3 server (a real S3-compatible server, not a mock) on a free loopback port, and a
    client of it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        yield endpoint, boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
            region_name="us-east-1",
        )  # fmt: skip
    finally:
        server.stop()


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, what: str | Callable[[], str] = "the condition"):
    """Wait until `predicate()` is true; `what` names the condition, or words it from how things stand at the end."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def kill_when(
    processes: Callable[[], list[int]],
    found: Callable[[list[int]], Any],
    timeout: float = 60.0,
    what: str = "the condition",
) -> Any:
    """Kills the processes (SIGKILL) once `found(pids)` holds while they are stopped (SIGSTOP), and returns what
    it found. Read while they run, a shard they are running may be done before the kill lands; read while they
    are stopped, it is what they were doing when they died."""

    def signal_all(pids: list[int], signum: int) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def stopped(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        return state in "TtZX"

    def stopped_and_found():
        pids = processes()
        if not pids:
            return None
        signal_all(pids, signal.SIGSTOP)
        wait_for(lambda: all(stopped(pid) for pid in pids), timeout=10, interval=0.005, what="the processes to stop")
        value = found(pids)
        signal_all(pids, signal.SIGKILL if value else signal.SIGCONT)
        return value

    return wait_for(stopped_and_found, timeout, interval=0.02, what=what)


def ids_from(start: int, *app_labels: str) -> None:
    """The next row of every model of these apps takes its id from `start` on, as in a portal that has run for
    years: a page is looked at with the ids it will show there (#1234567), not with a fresh database's #1. (A
    database that only grew would have ids this long in a full run of the suite, and a layout checked with #1
    would pass here and fail there.)"""
    connection = connections["default"]
    with connection.cursor() as cursor:
        for app_label in app_labels:
            for model in apps.get_app_config(app_label).get_models():
                if not isinstance(model._meta.pk, AutoField):
                    continue
                table, column = model._meta.db_table, model._meta.pk.column
                if connection.vendor == "postgresql":
                    cursor.execute("SELECT setval(pg_get_serial_sequence(%s, %s), %s)", [table, column, start])
                else:
                    cursor.execute("DELETE FROM sqlite_sequence WHERE name = %s", [table])
                    cursor.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [table, start])


def database_url() -> str:
    """The URL of the test database, for processes started by the tests."""
    db = connections["default"].settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    credentials = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        credentials += ":" + quote(db["PASSWORD"], safe="")
    return f"postgres://{credentials}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}/{db['NAME']}"


def process_env(**extra) -> dict:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(PLUGIN_PATH)]),
        "PYTHONFAULTHANDLER": "1",  # a process that hangs prints where it is on SIGABRT
    }
    if not settings.EMBEDDED_REDIS:
        env["REDIS_URL"] = settings.REDIS_URL
    return {**env, **extra}


def manage(*args) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


class Worker:
    """A `manage.py gpuworker` process: a node of CPU slots plus a control worker; with `gpus`, of the
    fake NVML's GPUs instead, one slot each."""

    def __init__(self, name: str, slots: int, gpus: bool = False, **env):
        self.name = name
        self.slots = slots
        self.log = open(settings.VAR_DIR / f"{name}.log", "ab")  # noqa: SIM115
        if gpus:
            env = {"E31_NVML_MODULE": "tests.fakes.fake_nvml", "E31_FAKE_GPUS": str(slots), **env}
        self.process = subprocess.Popen(
            manage("gpuworker", "--name", name, *([] if gpus else ["--cpu-slots", str(slots)])),
            env=process_env(**env),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        """Ctrl-C, as an operator stops it. One that has not stopped in 30 s is aborted, which makes it print
        where each of its threads is (PYTHONFAULTHANDLER), and the end of its log goes into the test's output."""
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            lines = (settings.VAR_DIR / f"{self.name}.log").read_text(errors="replace").splitlines()
            print(f"gpuworker {self.name} did not stop within 30 s of Ctrl-C; its log ends:", *lines[-80:], sep="\n")
        self.log.close()


class Workers(list):
    """Several gpuworker processes, stopped together."""

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc_info) -> None:
        for worker in self:
            worker.stop()


class Shared:
    """The processes that tests share across a run (a gpuworker fleet, a portal), each started by the first test
    that asks for it and kept up while the next test asks for it too; the run's tests are ordered so that those
    asking for the same ones run together (tests/conftest.py's pytest_collection_modifyitems). A test that kills
    or restarts a worker starts its own, and a test that asks for none runs with none up."""

    def __init__(self):
        self.running: dict[str, tuple[Any, contextlib.ExitStack]] = {}

    def get(self, name: str, start: Callable[[], contextlib.AbstractContextManager]) -> Any:
        """The process `name`, entered from `start()` the first time it is asked for."""
        if name not in self.running:
            with contextlib.ExitStack() as stack:
                value = stack.enter_context(start())
                self.running[name] = value, stack.pop_all()
        return self.running[name][0]

    def keep_only(self, names: Iterable[str]) -> None:
        for name in [name for name in self.running if name not in names]:
            self.running.pop(name)[1].close()


SHARED = Shared()


def wait_for_slots(worker: Worker) -> Worker:
    """Wait until a gpuworker's slots are registered and online (they come back after each flush)."""
    wait_for(
        lambda: Gpu.objects.online().filter(node__name=worker.name).count() == worker.slots,
        timeout=60,
        what="the gpuworker's slots to come online",
    )
    return worker


def client_for(user):
    client = Client()
    client.force_login(user)
    return client


def job_form(data: bytes | Path = EXAMPLE, name: str = "customers.csv", **fields) -> dict:
    content = data.read_bytes() if isinstance(data, Path) else data
    form = {
        "data": SimpleUploadedFile(name, content, content_type="text/csv"),
        "work": "clean-table",
        "gpus": "2",
        "hours": "1",
        "shape": "short-wide",
        "retention": "delete",
        "keep_days": "7",
    }
    form.update(fields)
    return form


def slow_job_form(seconds_per_batch="0.2"):
    """The job form for test-slow-echo over 2,000 records: slow enough to act on while it runs."""
    form = job_form(csv_bytes(2000), name="numbers.csv", work="test-slow-echo")
    form["param-test-slow-echo-seconds_per_batch"] = seconds_per_batch
    return form


def submit_example(organisation, partner, **spec) -> Job:
    """Submit examples/customers.csv for clean-table on 1 GPU for 1 hour, as the form and the CLI do."""
    with EXAMPLE.open("rb") as data:
        data = Data(file=NamedFile(data, "customers.csv"))
        return services.submit_job(organisation, partner, JobSpec(Work("clean-table"), data, Request(1, 1), **spec))


def admin_action(client, action: str, jobs: list[Job], **fields):
    """Run an action of the jobs' admin on these jobs, as the console posts it."""
    form = {"action": action, "_selected_action": [job.pk for job in jobs], **fields}
    return client.post("/admin/jobs/job/", form, follow=True)


class OutputZip:
    """A job's output as one zip, downloaded from the job page: each file in it named as when it is
    downloaded alone (job-<id>-<name>), read here by its name in the manifest."""

    def __init__(self, client: Client, job: Job):
        response = client.get(f"/jobs/{job.pk}/output/")
        assert response.status_code == 200, response.status_code
        self.archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
        self.prefix = f"job-{job.pk}-"
        assert all(name.startswith(self.prefix) for name in self.archive.namelist()), self.archive.namelist()
        self.names = [name.removeprefix(self.prefix) for name in self.archive.namelist()]

    def read(self, name: str) -> bytes:
        return self.archive.read(self.prefix + name)


def wait_for_end(job, timeout: float = 60.0):
    def ended():
        job.refresh_from_db()
        return job.state in ENDED

    def standing() -> str:
        events = [f"{event.at:%H:%M:%S} {event.state}: {event.message}" for event in job.events.order_by("at", "pk")]
        return f"job {job.pk} to end (it is {job.state}); its events:\n" + "\n".join(events)

    wait_for(ended, timeout=timeout, interval=0.1, what=standing)
    return job


def state_is(page, state: str, timeout: float = 60_000):
    # A selector, not wait_for_function: the page's Content-Security-Policy refuses the eval that one takes.
    page.wait_for_selector(f"#upload-status[data-state='{state}']", state="attached", timeout=timeout)


# Injected by the browser before any page script, so outside the policy: it records what the policy refused,
# and marks the page once htmx swapped a fragment in (polling ran). The test reads both without the eval that
# wait_for_function would need, which the policy refuses.
WATCH = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  const where = `${event.sourceFile}:${event.lineNumber}`;
  window.__violations.push(`${event.violatedDirective} refused ${event.blockedURI || "inline"} (${where})`);
});
document.addEventListener("htmx:afterSwap", () => { document.documentElement.dataset.swapped = "yes"; });
"""


def logged_in_page(browser, base: str, username: str = "partner", password: str = "pw-partner"):
    """A new page of `browser` (or of a browser context, one without JavaScript say), logged in through the
    partners' login page."""
    page = browser.new_page()
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("form [type=submit], form button.primary")
    page.wait_for_load_state()
    return page


class Watched:
    """A browser page whose policy violations, console errors and answers without a policy are collected."""

    def __init__(self, browser, base: str):
        self.base = base
        self.page = browser.new_page()
        self.page.add_init_script(WATCH)
        self.problems: list[str] = []
        self.page.on("console", self._console)
        self.page.on("response", self._response)

    def _console(self, message) -> None:
        where = message.location.get("url", "")
        # The admin's pages name no icon, so Chromium asks for /favicon.ico on its own: not the page's doing.
        if where.endswith("/favicon.ico"):
            return
        if message.type == "error" or "Content Security Policy" in message.text:
            self.problems.append(f"console: {message.text} ({where})")

    def _response(self, response) -> None:
        if response.status >= 400:
            self.problems.append(f"{response.status} on {response.url}")
        is_page = response.request.resource_type == "document" and response.url.startswith(self.base)
        if is_page and "content-security-policy" not in response.headers:
            self.problems.append(f"no policy on {response.url}")

    def visit(self, path: str) -> None:
        self.page.goto(f"{self.base}{path}")
        self.check(path)

    def check(self, where: str) -> None:
        violations = self.page.evaluate("window.__violations")
        assert not violations and not self.problems, f"{where}: {violations + self.problems}"

    def log_in(self, username: str, password: str, path: str = "/accounts/login/") -> None:
        self.visit(path)
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", password)
        self.page.click("form [type=submit], form button.primary")
        self.page.wait_for_load_state()
        self.check("after logging in")

    def wait_for_a_swap(self) -> None:
        self.page.evaluate("delete document.documentElement.dataset.swapped")
        self.page.wait_for_selector("html[data-swapped]", state="attached", timeout=60_000)


@contextlib.contextmanager
def celery_sends_to(url: str) -> Iterator[None]:
    """This process sends its tasks to the broker at `url` (one that is not there, to see a page say so)."""
    before = celery_app.conf.broker_url

    def point_at(broker: str) -> None:
        celery_app.conf.broker_url = broker
        # The app keeps its broker connections in pools made for the old URL: they are made again.
        celery_app._pool = celery_app.amqp._producer_pool = None

    point_at(url)
    try:
        yield
    finally:
        point_at(before)


BROKER_AWAY = "redis+socket:///nonexistent/redis.sock"


def assert_for_operators_who_may_view_jobs(url: str, partner_client, django_user_model) -> Client:
    """A console page: a partner is sent to the console's login, staff without `view_job` get 403, staff with it
    200. Returns the latter's client."""
    assert partner_client.get(url).status_code == 302, "to the console's login"
    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    assert client_for(staff).get(url).status_code == 403
    staff.user_permissions.set(Permission.objects.filter(codename="view_job"))
    viewer = client_for(staff)
    assert viewer.get(url).status_code == 200
    return viewer
