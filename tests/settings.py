"""Settings for the tests: the portal's own, with a var/ of their own and short timings.

Workers started by the tests inherit these through the environment.
"""

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_PATH = ROOT / "tests" / "plugin_path"

os.environ.setdefault("E31_VAR_DIR", str(ROOT / "var" / "test"))


def _redis_db_of(url: str, runner: int) -> str:
    """REDIS_URL with a database of this runner's own: the base one for the first, one lower for each next."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ImproperlyConfigured(f"Several test runners need a redis:// REDIS_URL, not {url!r}: run pytest alone")
    base = int(parts.path.strip("/") or 0)
    if runner > base:
        raise ImproperlyConfigured(
            f"Test runner {runner} needs a Redis database of its own {runner} below REDIS_URL's ({base}): each runner "
            f"empties its own, so name database {runner} or higher, or run one (make test TEST_RUNNERS=1)"
        )
    return urlunsplit(parts._replace(path=f"/{base - runner}"))


# `make test` runs the suite in several runners (pytest-xdist): each has a var/ (so its embedded Redis, its SQLite
# file, its job storage), a Redis database and an SMTP port of its own. The processes a runner starts inherit its
# environment, marked as done in E31_TEST_RUNNER, so they find the same.
_runner = os.environ.get("PYTEST_XDIST_WORKER")
if _runner and os.environ.get("E31_TEST_RUNNER") != _runner:
    os.environ["E31_TEST_RUNNER"] = _runner
    os.environ["E31_VAR_DIR"] = str(Path(os.environ["E31_VAR_DIR"]) / _runner)
    os.environ.pop("E31_STAGING_ROOTS", None)
    os.environ.pop("E31_TEST_SMTP_PORT", None)
    if "REDIS_URL" in os.environ:
        os.environ["REDIS_URL"] = _redis_db_of(os.environ["REDIS_URL"], int(_runner.removeprefix("gw")))
os.environ.setdefault("E31_HEARTBEAT_SECONDS", "1")
# A node counts as online for 10 beats here: a loaded machine may hold a beat up for seconds, and a
# form posted then must not find the fleet gone. Tests of a silent node wait for it, not for a time.
os.environ.setdefault("E31_NODE_TIMEOUT_SECONDS", "10")
os.environ.setdefault("E31_SHARD_LEASE_SECONDS", "5")
# A slot imports torch when a test's job first needs it, as the slots of most tests never do.
os.environ.setdefault("E31_WARM_SLOTS", "false")
# Server paths under the tests' var/ (staging-root) can be staged; "localhost" is a host staging may fetch
# from although it is not public (the tests' own HTTP servers). 127.0.0.1 stays refused.
os.environ.setdefault("E31_STAGING_ROOTS", str(Path(os.environ["E31_VAR_DIR"]) / "staging-root"))
os.environ.setdefault("E31_STAGING_ALLOWED_HOSTS", "localhost")
# Webhook retries after 1 s, then 2 s: a test sees a delivery fail twice and succeed within seconds.
os.environ.setdefault("E31_WEBHOOK_RETRY_SECONDS", "1,2,2,2,2")
os.environ.setdefault("E31_SECRET_KEY", "tests-only-secret-key-not-for-production-0123456789")
# Email goes to the SMTP server the tests start on loopback (tests/conftest.py), whatever the shell
# has set: its port is chosen here, once, and the workers the tests start (which import this too)
# find it in E31_TEST_SMTP_PORT and send to the same one.
if "E31_TEST_SMTP_PORT" not in os.environ:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        os.environ["E31_TEST_SMTP_PORT"] = str(probe.getsockname()[1])
os.environ.update(
    E31_EMAIL_HOST="127.0.0.1",
    E31_EMAIL_PORT=os.environ["E31_TEST_SMTP_PORT"],
    E31_EMAIL_TLS="false",
    E31_EMAIL_USER="",
    E31_EMAIL_PASSWORD="",
    E31_PUBLIC_URL="http://portal.test",
)

from portal.settings import *  # noqa: E402, F403
from portal.settings import DATABASES, VAR_DIR  # noqa: E402

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory: the worker processes the tests start must see the same database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Each test client loads the middleware anew, and whitenoise would then scan every static file again (17 ms of CPU a
# client): it finds a file when it is asked for instead, as it does under DEBUG. `make serve`
# (tests/portal/test_serve.py) and `make run` serve as before.
WHITENOISE_AUTOREFRESH = True
