"""Shared fixtures: a real Redis, real gpuworker processes, and the personas.

Personas: the partner (member of the partner organisation), a teammate in the same organisation,
an outsider from another organisation, and an operator (staff, in no organisation). A test logs one
in with client_for (force_login) or by posting the login page: the login lockout (axes) refuses
Client.login, which authenticates without a request.
"""

import contextlib
import email
import email.policy
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from aiosmtpd.controller import Controller
from django.conf import settings
from django.core.management.base import CommandError
from django.db import OperationalError, connections, transaction
from django.test import TransactionTestCase
from django.utils import timezone

from tests.settings import PLUGIN_PATH, ROOT

sys.path.insert(0, str(PLUGIN_PATH))

EXAMPLE = ROOT / "examples" / "customers.csv"


_flush = TransactionTestCase._fixture_teardown


def _flush_past_deadlocks(case):
    """Empty the database after a transactional test, again if PostgreSQL chose the TRUNCATE as a
    deadlock's victim: the worker processes stay up between tests and their transactions lock the
    same tables in another order. The aborted TRUNCATE changed nothing, so taking it again is safe."""
    for attempt in range(1, 6):
        try:
            with ledger_open_for_flush():
                return _flush(case)
        except CommandError as error:
            cause = error.__cause__
            if attempt == 5 or not isinstance(cause, OperationalError) or "deadlock" not in str(cause):
                raise
            time.sleep(0.2 * attempt)


TransactionTestCase._fixture_teardown = _flush_past_deadlocks


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
    import boto3
    from moto.server import ThreadedMotoServer

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


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="session", autouse=True)
def fresh_storage():
    """Job storage and uploads start empty: a run before this one (CI runs the suite twice in one
    checkout, on two databases) leaves files under job ids this run hands out again."""
    for folder in (settings.MEDIA_ROOT, settings.E31_UPLOAD_DIR):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)


@pytest.fixture(scope="session", autouse=True)
def redis_server():
    """The embedded Redis on the tests' own socket, or the Redis server REDIS_URL names (emptied)."""
    if settings.EMBEDDED_REDIS:
        from portal import embedded_redis

        socket_path = settings.VAR_DIR / "redis.sock"
        data_dir = settings.VAR_DIR / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        argv = embedded_redis.server_argv(socket_path, data_dir)
        argv[argv.index("--appendonly") + 1] = "no"
        server = subprocess.Popen(argv)
        embedded_redis.wait_until_ready(socket_path)
        yield redis.Redis(unix_socket_path=str(socket_path))
        server.terminate()
        server.wait()
    else:
        client = redis.Redis.from_url(settings.REDIS_URL)
        client.flushdb()
        yield client


class Inbox:
    """What the tests' SMTP server received: each email as a parsed message, in order."""

    def __init__(self):
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 OK"

    def to(self, address: str) -> list[email.message.EmailMessage]:
        return [message for message in self.messages if address in message["To"]]


@pytest.fixture(scope="session", autouse=True)
def smtp_server() -> Iterator[Inbox]:
    """A real SMTP server on loopback, on the port tests/settings.py chose for every process."""
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=settings.EMAIL_PORT)
    controller.start()
    yield inbox
    controller.stop()


@pytest.fixture
def mailbox(smtp_server, settings) -> Inbox:
    """The emails this test sent, through the SMTP server as the workers send them (pytest-django would
    keep the test process's own in memory). Those still arriving from an earlier test's jobs are to
    other addresses."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    smtp_server.messages.clear()
    return smtp_server


@pytest.fixture(autouse=True)
def nothing_counted(redis_server):
    """Each test starts with no rate counted: the cache's keys go, only they (the same Redis holds the broker's
    queues, which cache.clear() would empty too). Lockouts are rows, gone with each test's database."""
    keys = list(redis_server.scan_iter(match=f"{settings.CACHES['default']['KEY_PREFIX']}:*"))
    if keys:
        redis_server.delete(*keys)


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
    }
    if not settings.EMBEDDED_REDIS:
        env["REDIS_URL"] = settings.REDIS_URL
    return {**env, **extra}


def manage(*args) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


class Worker:
    """A `manage.py gpuworker` process: a node of CPU slots plus a control worker."""

    def __init__(self, name: str, slots: int, **env):
        self.name = name
        self.slots = slots
        self.log = open(settings.VAR_DIR / f"{name}.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            manage("gpuworker", "--cpu-slots", str(slots), "--name", name),
            env=process_env(**env),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        self.process.send_signal(2)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@pytest.fixture(scope="module")
def gpuworker(django_db_setup, django_db_blocker, redis_server):
    """Two CPU slots on a real gpuworker, for the module's tests."""
    worker = Worker(f"test-{os.getpid()}", slots=2)
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def two_nodes(django_db_setup, redis_server):
    """Two gpuworker processes as two nodes of one CPU slot each, for the module's tests."""
    nodes = [Worker(f"node-{letter}-{os.getpid()}", slots=1) for letter in "ab"]
    yield nodes
    for node in nodes:
        node.stop()


def wait_for_slots(worker: Worker) -> Worker:
    """Wait until a gpuworker's slots are registered and online (they come back after each flush)."""
    from jobs.models import Gpu

    wait_for(
        lambda: Gpu.objects.online().filter(node__name=worker.name).count() == worker.slots,
        timeout=60,
        what="the gpuworker's slots to come online",
    )
    return worker


@pytest.fixture
def fleet(gpuworker, transactional_db):
    return wait_for_slots(gpuworker)


@pytest.fixture
def online_slots(db):
    """A fleet of four CPU slots that are online, with no worker behind them (form and request tests)."""
    from jobs.models import Gpu, Node

    Gpu.objects.update(last_seen=None)
    node = Node.objects.create(name="fake-node", hostname="fake", last_seen=timezone.now())
    return [
        Gpu.objects.create(
            node=node, index=i, kind=Gpu.Kind.CPU, name="CPU slot", queue=f"slot.fake.{i}", last_seen=timezone.now()
        )
        for i in range(4)
    ]


@pytest.fixture
def organisation(db):
    from portal.models import Organisation

    return Organisation.objects.create(name="Partner Lab", slug="partner-lab")


@pytest.fixture
def other_organisation(db):
    from portal.models import Organisation

    return Organisation.objects.create(name="Other Lab", slug="other-lab")


def _member(django_user_model, username, organisation):
    from portal.models import Membership

    user = django_user_model.objects.create_user(username, f"{username}@example.com", "pw-" + username)
    Membership.objects.create(user=user, organisation=organisation)
    return user


@pytest.fixture
def partner(django_user_model, organisation):
    return _member(django_user_model, "partner", organisation)


@pytest.fixture
def teammate(django_user_model, organisation):
    return _member(django_user_model, "teammate", organisation)


@pytest.fixture
def outsider(django_user_model, other_organisation):
    return _member(django_user_model, "outsider", other_organisation)


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_superuser("operator", "operator@example.com", "pw-operator")


@pytest.fixture
def rate_card(db):
    from decimal import Decimal

    from billing.models import RateCard

    return RateCard.objects.create(rate_per_gpu_hour=Decimal("3.60"), effective_from=timezone.now() - timedelta(days=1))


def client_for(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def partner_client(partner):
    return client_for(partner)


@pytest.fixture
def outsider_client(outsider):
    return client_for(outsider)


def job_form(data: bytes | Path = EXAMPLE, name: str = "customers.csv", **fields) -> dict:
    from django.core.files.uploadedfile import SimpleUploadedFile

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


def wait_for_end(job, timeout: float = 60.0):
    from jobs.models import ENDED

    def ended():
        job.refresh_from_db()
        return job.state in ENDED

    wait_for(ended, timeout=timeout, interval=0.1, what=f"job {job.pk} to end (it is {job.state})")
    return job
