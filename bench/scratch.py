"""What every benchmark starts from: a scratch var/ of its own on the embedded defaults (SQLite, the
embedded Redis), Django set up there, and rows from examples/generate.py.

Import this first, call `setup()`, then import the portal's modules.
"""

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = Path(tempfile.mkdtemp(prefix="e31-bench-"))


def setup(**env: str) -> None:
    """Point the portal at the scratch var/ (and `env`), away from any DATABASE_URL or REDIS_URL."""
    os.environ["E31_VAR_DIR"] = str(SCRATCH / "var")
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    for variable in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(variable, None)
    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    import django

    django.setup()


def make_csv(rows: int) -> Path:
    import generate

    path = SCRATCH / "rows.csv"
    sys.argv = ["generate", str(rows), str(path)]
    generate.main()
    return path


@contextlib.contextmanager
def embedded_broker() -> Iterator[None]:
    """The embedded Redis on the scratch socket, for as long as the benchmark runs."""
    from django.conf import settings

    from portal import embedded_redis

    socket = settings.VAR_DIR / "redis.sock"
    server = subprocess.Popen(embedded_redis.server_argv(socket, settings.VAR_DIR), stdout=subprocess.DEVNULL)
    try:
        embedded_redis.wait_until_ready(socket)
        yield
    finally:
        server.terminate()
        server.wait()
