"""What every benchmark starts from: a scratch var/ of its own on the embedded defaults (SQLite, the
embedded Redis), Django set up there, and rows from examples/generate.py.

Import this first, call `setup()`, then import the portal's modules.
"""

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A benchmark's own subprocesses (a bare loop in a process of its own) share its scratch folder.
SCRATCH = Path(os.environ.get("E31_BENCH_SCRATCH") or tempfile.mkdtemp(prefix="e31-bench-"))
os.environ["E31_BENCH_SCRATCH"] = str(SCRATCH)


def as_a_worker() -> None:
    """Run this benchmark with the workers' memory settings (portal.procs.KEEP_FREED_MEMORY), so
    what runs in its own process (staging, a bare loop) runs as in the control worker or a slot."""
    sys.path.insert(0, str(ROOT))
    from portal.procs import KEEP_FREED_MEMORY

    if any(os.environ.get(name) != value for name, value in KEEP_FREED_MEMORY.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **KEEP_FREED_MEMORY})


def as_a_slot_process() -> None:
    """Go on in a process started as a slot's pool process is: the work kinds' libraries imported
    (jobs.tasks.warm_the_slot), then forked (this process waits for the fork and exits with it), and
    what the fork was made with left out of every garbage collection (portal.celery). Call it after
    `setup()`, in a process that has not yet used the database."""
    from jobs import processors

    processors.warm_runnable()
    if pid := os.fork():
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status))
    as_a_pool_process()


def cpu_seconds(root: int) -> float:
    """CPU seconds (user and system) used so far by the process `root` and every process under it that
    is still running."""
    parents, used, tick = {}, {}, os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    under = {root}
    while added := {pid for pid, parent in parents.items() if parent in under} - under:
        under |= added
    return sum(used.get(pid, 0.0) for pid in under)


def as_a_pool_process() -> None:
    """Leave what this benchmark has imported out of every garbage collection from here on, as each of
    the workers' pool processes does once it is forked: call it once the imports are done."""
    from portal.celery import freeze_what_was_imported

    freeze_what_was_imported()


def setup(**env: str) -> None:
    """Point the portal at the scratch var/ (and `env`), away from any DATABASE_URL or REDIS_URL the
    shell has; `env` may name its own."""
    os.environ["E31_VAR_DIR"] = str(SCRATCH / "var")
    for variable in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(variable, None)
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    import django

    django.setup()


def make_csv(rows: int) -> Path:
    import generate

    path = SCRATCH / "rows.csv"
    generate.main([str(path), "--rows", str(rows), "--force"])
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


def start_worker(slots: int, name: str = "bench") -> subprocess.Popen:
    """A gpuworker with `slots` CPU slots (or the machine's GPUs, with slots=0), once they are online."""
    from jobs.models import Gpu

    argv = [sys.executable, str(ROOT / "manage.py"), "gpuworker", "--name", name]
    if slots:
        argv += ["--cpu-slots", str(slots)]
    worker = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not Gpu.objects.online().filter(node__name=name).exists() or (
        slots and Gpu.objects.online().filter(node__name=name).count() != slots
    ):
        if time.monotonic() > deadline or worker.poll() is not None:
            worker.kill()  # with its slot workers (PDEATHSIG): nothing of it outlives the benchmark
            raise RuntimeError("the gpuworker did not come online")
        time.sleep(0.2)
    time.sleep(2)  # the Celery workers behind the slots finish starting
    return worker


def stop_worker(worker: subprocess.Popen, name: str = "bench") -> None:
    from jobs.models import Gpu

    worker.send_signal(2)
    worker.wait(60)
    Gpu.objects.filter(node__name=name).update(last_seen=None)


def wait_for_success(job):
    """The job once it has ended; it must have succeeded."""
    from jobs.models import State

    while not type(job).objects.get(pk=job.pk).ended:
        time.sleep(0.2)
    job.refresh_from_db()
    if job.state != State.SUCCEEDED:
        raise RuntimeError(f"job {job.pk} {job.state}: {job.error}")
    return job
