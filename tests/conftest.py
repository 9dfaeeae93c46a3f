"""Shared fixtures: a real Redis, real gpuworker processes, the personas, and a browser.

Personas: the partner (member of the partner organisation), a teammate in the same organisation,
an outsider from another organisation, and an operator (staff, in no organisation). A test logs one
in with client_for (force_login) or by posting the login page: the login lockout (axes) refuses
Client.login, which authenticates without a request.
"""

import email
import email.policy
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal

import pytest
import redis
from aiosmtpd.controller import Controller
from django.conf import settings
from django.core.management.base import CommandError
from django.db import OperationalError
from django.test import TransactionTestCase
from django.utils import timezone
from playwright.sync_api import sync_playwright

from billing.models import RateCard
from jobs import queue_figures
from jobs.models import Gpu, Node
from portal import embedded_redis
from portal.models import Membership, Organisation
from tests.settings import PLUGIN_PATH
from tests.support import (
    CHROMIUM,
    MODEL_SKIPS,
    SHARED,
    Worker,
    Workers,
    client_for,
    ledger_open_for_flush,
    wait_for_slots,
)

sys.path.insert(0, str(PLUGIN_PATH))

# A suite started in the background by a shell without job control (`nohup make test &`) inherits SIGINT
# ignored, and so would every process a test starts: those that stop a command with Ctrl-C need it heard.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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


@pytest.fixture(autouse=True)
def no_queue_figures(redis_server):
    """Each test starts with no queue figures stored (jobs.queue_figures): an earlier test's jobs had
    the same ids."""
    redis_server.delete(queue_figures.FIGURES, queue_figures.CHANGED)


# The fixtures that share a process, and the files that define them.
SHARED_FIXTURES = ("gpuworker", "sampling_gpuworker", "two_nodes", "portal")
SHARING_MODULES = {"tests.conftest", "tests.client.conftest"}
NEEDS = pytest.StashKey[tuple[str, ...]]()


@pytest.fixture(scope="module")
def gpuworker(django_db_setup, django_db_blocker, redis_server):
    """Two CPU slots on a real gpuworker, shared by the modules that ask for it."""
    return SHARED.get("gpuworker", lambda: Worker(f"test-{os.getpid()}", slots=2))


@pytest.fixture(scope="module")
def sampling_gpuworker(django_db_setup, django_db_blocker, redis_server):
    """Two CPU slots whose samples stop after 3 s, and whose passes sized by a sample are cut into shards of
    1 s of work, shared by the modules that ask for it (as their `gpuworker`)."""
    return SHARED.get(
        "sampling_gpuworker",
        lambda: Worker(f"test-sample-{os.getpid()}", slots=2, E31_SAMPLE_SECONDS="3", E31_SHARD_SECONDS="1"),
    )


@pytest.fixture(scope="module")
def two_nodes(django_db_setup, redis_server):
    """Two gpuworker processes as two nodes of one CPU slot each, shared by the modules that ask for them."""
    return SHARED.get("two_nodes", lambda: Workers(Worker(f"node-{letter}-{os.getpid()}", slots=1) for letter in "ab"))


def shared_by(item: pytest.Item) -> tuple[str, ...]:
    """The shared processes a test asks for: the fixtures of SHARED_FIXTURES it uses, where its module does not
    define its own of that name (as tests/jobs/test_sample.py does, whose `gpuworker` is the sampling one)."""
    names = item.fixturenames
    definitions = item._fixtureinfo.name2fixturedefs  # pytest's own record of which definition a name resolved to
    return tuple(
        sorted(
            name
            for name in SHARED_FIXTURES
            if name in names and definitions.get(name) and definitions[name][-1].func.__module__ in SHARING_MODULES
        )
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """The tests that ask for no shared process run first, then those that share the same ones, group by group
    (a stable sort: within each group the tests keep their order), so each shared process starts once a run and
    is never up where a test did not ask for it.

    Run in several runners (`make test`: pytest-xdist's loadgroup), a group is one runner's, whole, and so is each
    module of the tests that share nothing (its module-scoped processes start once). This runs before xdist reads
    the groups."""
    for item in items:
        item.stash[NEEDS] = shared_by(item)
        item.add_marker(pytest.mark.xdist_group("+".join(item.stash[NEEDS]) or item.nodeid.partition("::")[0]))
        if "browser" in item.fixturenames:
            item.add_marker(pytest.mark.browser)
        if any(mark in MODEL_SKIPS for mark in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.model)
    items.sort(key=lambda item: item.stash[NEEDS])


def pytest_runtest_teardown(item, nextitem):
    """What the next test does not ask for is stopped before it (this runs before the fixtures' own teardown:
    after the last test, the database goes)."""
    SHARED.keep_only(nextitem.stash[NEEDS] if nextitem is not None else ())


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    """A run cut short (-x, Ctrl-C) leaves no shared process behind."""
    SHARED.keep_only(())


@pytest.fixture
def fleet(gpuworker, transactional_db):
    return wait_for_slots(gpuworker)


@pytest.fixture
def online_slots(db):
    """A fleet of four CPU slots that are online, with no worker behind them (form and request tests). No worker
    beats for them, so they are seen a day ahead: online for as long as the test takes, however loaded the machine
    (a timeout of E31_NODE_TIMEOUT_SECONDS from now would make a slow test see its fleet go)."""
    Gpu.objects.update(last_seen=None)
    seen = timezone.now() + timedelta(days=1)
    node = Node.objects.create(name="fake-node", hostname="fake", last_seen=seen)
    return [
        Gpu.objects.create(
            node=node, index=i, kind=Gpu.Kind.CPU, name="CPU slot", queue=f"slot.fake.{i}", last_seen=seen
        )
        for i in range(4)
    ]


@pytest.fixture
def organisation(db):
    return Organisation.objects.create(name="Partner Lab", slug="partner-lab")


@pytest.fixture
def other_organisation(db):
    return Organisation.objects.create(name="Other Lab", slug="other-lab")


def _member(django_user_model, username, organisation):
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
    return RateCard.objects.create(rate_per_gpu_hour=Decimal("3.60"), effective_from=timezone.now() - timedelta(days=1))


@pytest.fixture
def partner_client(partner):
    return client_for(partner)


@pytest.fixture
def outsider_client(outsider):
    return client_for(outsider)


@pytest.fixture
def dataset(tmp_path):
    """A CSV file of 60,000 records for the browser tests to upload."""
    path = tmp_path / "records.csv"
    rows = b"".join(b"%d,record number %d of the browser test\n" % (n, n) for n in range(60_000))
    path.write_bytes(b"id,text\n" + rows)
    return path


@pytest.fixture
def browser(monkeypatch):
    """Debian's Chromium, driven by Playwright."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop here
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM or "chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
        )
        yield chromium
        chromium.close()
