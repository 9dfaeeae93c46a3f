"""Sending work to the workers: each task by name, after the transaction commits, never raising.

Nothing here imports `jobs.tasks`, so the domain (lifecycle, services, views) never imports back up
into the worker code. A send runs once the database has committed; outside a transaction, at once.
A broker that is unreachable then cannot undo what was committed: the send is logged, one line
naming the task and the job, and dropped. The safety net sends each kind again:

- stage: reconcile (beat) sends a job left submitted to staging again;
- schedule: beat asks every 5 s and every gpuworker heartbeat asks too;
- run_slot: the node's heartbeat sends a new task for a hold nobody reports on
  (jobs.workers.node.serve_held_slots), and reconcile for a running job no slot works on;
- assemble: reconcile sends a finishing job without output its assembly again, and a job that
  ended early with finished shards and no output, for ten minutes after its end;
- purge_staged_copy_if_due: the retention beat (purge_expired) purges what is due;
- notify_ended: reconcile sends it again for an ended pass whose submitter was not told, for an hour.

A caller that answers a person (a page, the CLI) wraps its action in `unsent()` to learn whether
the queue took everything, and says so."""

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from functools import partial

from django.db import transaction
from kombu.exceptions import OperationalError

from portal.celery import app

log = logging.getLogger(__name__)

# How a page or the CLI begins to say that something it did waits for the broker.
UNREACHABLE = "The job queue is unreachable just now"

_watching: ContextVar[list[str] | None] = ContextVar("unsent", default=None)
_hurried: ContextVar[list[str] | None] = ContextVar("hurried", default=None)


def stage(job_id: int) -> None:
    """Stage a submitted job's data (control queue)."""
    send_on_commit("jobs.tasks.stage", job_id)


def schedule() -> None:
    """Start the queued jobs whose GPUs are free (control queue)."""
    send_on_commit("jobs.tasks.schedule")


def run_slot(job_id: int, allocation_id: int, runner: str, queue: str) -> None:
    """Work a held slot's share of the job, as the hold's task `runner`: sent to that slot's own queue."""
    send_on_commit("jobs.tasks.run_slot", job_id, allocation_id, runner, queue=queue)


def assemble(job_id: int) -> None:
    """Assemble a job's output from its finished shards (control queue)."""
    send_on_commit("jobs.tasks.assemble", job_id)


def notify_ended(job_id: int) -> None:
    """Email whoever submitted a job that it ended (control queue)."""
    send_on_commit("jobs.tasks.notify_ended", job_id)


def purge_staged_copy_if_due(job_id: int) -> None:
    """Delete an ended job's staged copy if its retention is up (control queue)."""
    send_on_commit("jobs.tasks.purge_staged_copy_if_due", job_id)


@contextlib.contextmanager
def unsent() -> Iterator[list[str]]:
    """The names of the tasks sent within that the broker did not take, to tell a person so."""
    names: list[str] = []
    token = _watching.set(names)
    try:
        yield names
    finally:
        _watching.reset(token)


@contextlib.contextmanager
def without_waiting() -> Iterator[None]:
    """Sends within are tried once, and once one fails the rest are dropped without trying: a
    gpuworker's heartbeat must not be held up past a node's timeout by a broker that is away."""
    failed: list[str] = []
    token = _hurried.set(failed)
    try:
        yield
    finally:
        _hurried.reset(token)


def refused() -> bool:
    """Whether, within `without_waiting()`, the broker has refused a send already."""
    return bool(_hurried.get())


def send_on_commit(
    name: str, *args: int | str, queue: str | None = None, countdown: float | None = None, about: str = "job"
) -> None:
    """Send the task `name` after commit; a refusal is logged naming `about` and the first argument (a job's
    id, unless `about` says what else it is), and dropped."""
    # Taken now: the commit may come after the caller's `unsent()` or `without_waiting()` has closed.
    sending = partial(_send, name, args, queue, countdown, about, _watching.get(), _hurried.get())
    transaction.on_commit(sending)


def _send(
    name: str,
    args: tuple[int | str, ...],
    queue: str | None,
    countdown: float | None,
    about: str,
    watcher: list[str] | None,
    hurried: list[str] | None,
) -> None:
    about = f"{about} {args[0]}: " if args else ""
    options: dict = {"queue": queue} if queue else {}
    if countdown is not None:
        options["countdown"] = countdown
    if hurried is not None:
        if hurried:
            log.info("%s%s was not sent, the job queue was unreachable a moment ago", about, name)
            return
        options["retry"] = False
    try:
        app.send_task(name, args=args, **options)
    except OperationalError as error:
        log.warning("%s%s was not sent, the job queue is unreachable (%s)", about, name, error)
        for names in (watcher, hurried):
            if names is not None:
                names.append(name)
