"""`manage.py gpuworker`: the worker side of one machine.

One Celery worker process per GPU found by NVML (or per CPU slot), pinned to it and consuming a
queue of its own, plus one worker for the control queue (staging, scheduling, assembly) and one for
the webhooks queue (posts that wait on other servers, never ahead of staging). The node
and its slots are registered and kept alive with heartbeats; a slot counts once its worker is ready.
A worker that dies is restarted, and its slot's holds end when it was last seen: a dead GPU is not
metered. Each heartbeat also takes nodes that missed theirs offline
(jobs.workers.node.take_silent_nodes_offline), gives each hold on this node a live slot task
(serve_held_slots), and asks for a schedule while a job waits and this node has a free slot.

Slot workers die with the gpuworker (SIGKILL from the kernel, their pool processes with them): a
restarted gpuworker never runs a GPU beside its predecessor's workers, and their shards are taken back.
"""

import logging
import os
import shutil
import signal
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import DatabaseError, close_old_connections, connection
from django.db.backends.signals import connection_created
from django.utils import timezone
from kombu.exceptions import OperationalError

from jobs import enqueue, processors
from jobs.workers import node as nodes
from jobs.workers import nvml
from portal.procs import KEEP_FREED_MEMORY, Child, Children, StopRequested

log = logging.getLogger(__name__)

# Each slot's share of the cores, for every math library's thread pool (RAYON: Hugging Face's tokenizers).
THREAD_VARIABLES = (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS", "RAYON_NUM_THREADS"
)  # fmt: skip


# What every Celery worker of the node runs with: memory kept for reuse (portal.procs.KEEP_FREED_MEMORY), and
# Django's system checks not run again: the gpuworker ran them as it started, and a worker would load every URL
# conf and view for them (a fifth of its start's CPU, docs/benchmarks.md), at each restart too.
WORKER_ENVIRONMENT = {"CELERY_SKIP_CHECKS": "1", **KEEP_FREED_MEMORY}


def slot_environment(threads: int) -> dict[str, str]:
    """What a slot's process runs with: its share of the cores for every math library, and WORKER_ENVIRONMENT."""
    return {**dict.fromkeys(THREAD_VARIABLES, str(threads)), **WORKER_ENVIRONMENT}


def cuda_device(spec: nodes.SlotSpec) -> str:
    """The slot's GPU as CUDA is to see it: by its UUID, since CUDA numbers GPUs fastest first and NVML by
    their PCI bus, so that on a machine of mixed GPUs an index could name another than the one metered."""
    return spec.uuid or str(spec.index)


def celery_worker(queue: str, name: str, concurrency: int = 1) -> list[str]:
    return [
        sys.executable, "-m", "celery", "-A", "portal", "worker",
        "--queues", queue, "--hostname", name, "--concurrency", str(concurrency),
        "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle", "--without-heartbeat",
        "--loglevel", "INFO",
    ]  # fmt: skip


class Command(BaseCommand):
    help = "Run this machine's GPU workers (or CPU slots when it has no GPU)."

    def add_arguments(self, parser):
        parser.add_argument("--cpu-slots", type=int, help="Run this many CPU slots even if GPUs are found.")
        parser.add_argument("--name", default=nodes.default_node_name(), help="The node's name (default: hostname).")
        parser.add_argument(
            "--no-control", action="store_true", help="Do not run the control and webhooks queues' workers here."
        )

    def handle(self, *args, cpu_slots, name, no_control, **options):
        gpus = [] if cpu_slots else nvml.discover()
        specs = nodes.slot_specs(gpus, cpu_slots or settings.E31_CPU_SLOTS)
        driver = gpus[0].driver if gpus else ""
        connection_created.connect(bound_lock_waits)
        connection.close()  # the next query opens one with the bound
        stop = StopRequested()
        children = Children()
        threads = max(1, (os.cpu_count() or 1) // len(specs))
        nodes.restarted(name)
        ready_dir = Path(tempfile.mkdtemp(prefix="e31-gpuworker-"))
        by_index: dict[int, Child] = {}
        for spec in specs:
            env = slot_environment(threads)
            env["CUDA_VISIBLE_DEVICES"] = cuda_device(spec) if gpus else ""
            env["E31_READY_FILE"] = str(ready_dir / f"slot{spec.index}")
            queue = nodes.queue_name(name, spec.index)
            by_index[spec.index] = children.start(
                queue,
                celery_worker(queue, f"slot{spec.index}@{name}"),
                env,
                stop_signal=signal.SIGQUIT,
                death_signal=signal.SIGKILL,
            )
        if not no_control:
            for queue in ("control", "webhooks"):
                worker = celery_worker(queue, f"{queue}@{name}", 2)
                children.start(queue, worker, WORKER_ENVIRONMENT, stop_signal=signal.SIGQUIT)
        noun = "GPU" if gpus else "CPU slot"
        work_kinds = processors.runnable_here()
        self.stdout.write(
            f"gpuworker {name}: {len(specs)} {noun}{'s' if len(specs) != 1 else ''}; runs {', '.join(work_kinds)}",
            ending="\n",
        )
        for processor in processors.available():
            if processor.missing():
                self.stderr.write(
                    f"{processor.name} cannot run here: no {', '.join(processor.missing())} "
                    "(pip install -r requirements-gpu.txt)"
                )
        self.stdout.flush()
        scheduled = False
        stopped: set[int] = set()
        try:
            while not stop.requested:
                close_old_connections()
                for child in children.children:
                    if child.process.poll() is not None and not stop.requested:
                        self.stderr.write(f"{child.name} exited with {child.process.returncode}; restarting it")
                        stopped |= {index for index, slot in by_index.items() if slot is child}
                        self.attempt(f"restarting {child.name}", restart, child)
                # Seen when they were looked at, not when the write lands: a slot killed in between was not alive then.
                seen = timezone.now()
                ready = {index for index, child in by_index.items() if is_ready(child)}
                self.attempt("the heartbeat", heartbeat, name, specs, driver, ready, gpus, work_kinds, seen)
                for index in sorted(stopped):
                    if self.attempt(f"ending slot {index}'s holds", nodes.slot_stopped, name, index):
                        stopped.discard(index)
                self.attempt("taking silent nodes offline", nodes.take_silent_nodes_offline)
                # A broker that is away costs a beat one refused send, not a retry per message.
                with enqueue.without_waiting():
                    self.attempt("serving held slots", nodes.serve_held_slots, name, ready)
                    if self.attempt("asking for a schedule", nodes.ask_for_a_schedule, name, not scheduled):
                        scheduled = True
                stop.sleep(settings.E31_HEARTBEAT_SECONDS)
        finally:
            self.attempt("going offline", nodes.go_offline, name)
            # The slots' and the control queue's workers wait on none of the others: a stop takes the longest one's
            # time, not their sum (seconds each).
            children.stop_all(together=True)
            shutil.rmtree(ready_dir, ignore_errors=True)

    def attempt(self, what: str, step, *args) -> bool:
        """Run one step of a beat; one that fails (the database or the broker away, or any other
        error) is reported and the next beat tries again: the supervisor itself never stops on it,
        since its slot workers die with it."""
        try:
            step(*args)
        except (DatabaseError, OperationalError) as error:
            self.stderr.write(f"{what} failed: {type(error).__name__}: {error}")
            return False
        except Exception:
            log.exception("%s failed", what)
            return False
        return True


def bound_lock_waits(sender, connection, **kwargs) -> None:
    """The supervisor waits at most half a node's timeout for a row or table another process holds: a step
    that would wait longer fails, is reported, and the next beat tries again, so that a stop (which ends the
    node's holds first) is never held up behind someone else's transaction."""
    milliseconds = settings.E31_NODE_TIMEOUT_SECONDS * 500
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SET lock_timeout = {milliseconds}")
        elif connection.vendor == "sqlite":
            cursor.execute(f"PRAGMA busy_timeout = {milliseconds}")


def heartbeat(
    name: str, specs, driver: str, ready: set[int], gpus: list, work_kinds: list[str], seen: datetime
) -> None:
    """The node and its ready slots were seen at `seen`, with their GPUs' readings."""
    nodes.register(name, specs, driver, ready, nvml.readings() if gpus else None, work_kinds, seen)


def restart(child: Child) -> None:
    """Start an exited worker again, once what is left of its session is gone and its slot's ready
    file (if it is a slot) no longer says it is ready."""
    child.kill_leftovers()
    if ready_file := child.env.get("E31_READY_FILE"):
        Path(ready_file).unlink(missing_ok=True)
    child.restarts += 1
    child.start()


def is_ready(child: Child) -> bool:
    """Whether the slot's worker runs and consumes its queue: its Celery worker wrote its process id to
    its ready file when it became ready (portal.celery)."""
    try:
        return child.alive and Path(child.env["E31_READY_FILE"]).read_text() == str(child.process.pid)
    except OSError:
        return False
