"""`make serve`: gunicorn answers the portal's pages, and whitenoise the static files collected for it,
compressed; database connections are kept between requests and checked before they are used again."""

import http.client
import os
import signal
import socket
import subprocess

import pytest
from celery.fixups.django import DjangoFixup
from django.conf import settings

from portal.celery import app
from tests.settings import ROOT
from tests.support import process_env, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _get(port: int, path: str, **headers) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    response.body = response.read()
    connection.close()
    return response


@pytest.fixture
def served():
    """`make serve` as production runs it (the venv and the client's wheel taken as built), on a free port."""
    port = _free_port()
    log = open(settings.VAR_DIR / "serve.log", "ab")  # noqa: SIM115
    command = ["make", "--no-print-directory", "-o", ".venv/.requirements", "-o", "client-wheel", "serve"]
    env = process_env(PORT=str(port), E31_WEB_WORKERS="1", E31_WEB_THREADS="2")
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: _listening(port) or server.poll() is not None, timeout=120, what="gunicorn to listen")
        assert server.poll() is None, f"make serve exited with {server.returncode}; see {log.name}"
        yield port
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(60)
        log.close()


def test_it_serves_pages_and_collected_static_files_through_gunicorn(served):
    page = _get(served, "/accounts/login/")
    assert page.status == 200 and page.getheader("Server") == "gunicorn"
    assert b'name="username"' in page.body
    style = _get(served, "/static/css/portal.css", **{"Accept-Encoding": "gzip"})
    assert style.status == 200
    assert style.getheader("Content-Encoding") == "gzip", "the compressed copy collectstatic wrote"
    assert (settings.STATIC_ROOT / "css" / "portal.css.gz").exists()


def test_it_keeps_database_connections_and_checks_them():
    database = settings.DATABASES["default"]
    assert database["CONN_MAX_AGE"] == int(os.environ.get("E31_DB_CONN_MAX_AGE", "60"))
    assert database["CONN_HEALTH_CHECKS"] is True


def test_celery_workers_close_their_connections_around_every_task():
    """Celery's Django fix-up closes a worker's connections before and after each task unless told to reuse
    them: a task never finds a connection kept past E31_DB_CONN_MAX_AGE or broken by a database restart."""
    assert any(isinstance(fixup, DjangoFixup) for fixup in app._fixups)
    assert app.conf.get("CELERY_DB_REUSE_MAX") is None
