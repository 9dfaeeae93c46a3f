"""The Celery app: workers and beat read their settings from Django's (CELERY_* names)."""

import gc
import os
import signal
from pathlib import Path

from celery import Celery
from celery.signals import worker_init, worker_process_init, worker_ready

from portal.procs import die_with_parent

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal", task_cls="celery.contrib.django.task:DjangoTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# About a minute of retries: a task that sends another while Redis restarts (a slot finishing a job
# sends its assembly) waits for the broker rather than lose the message. Web requests keep Celery's
# short default and tell the user the queue is unreachable; beat's reconcile covers longer outages.
WORKER_PUBLISH_RETRY_POLICY = {"max_retries": 60, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


@worker_init.connect
def wait_out_broker_restarts(sender, **kwargs) -> None:
    sender.app.conf.task_publish_retry_policy = WORKER_PUBLISH_RETRY_POLICY


@worker_process_init.connect
def die_with_the_worker(**kwargs) -> None:
    """A pool process goes when its worker's main process goes: it must never run a slot's shard beside
    the worker that replaces it (the shard is taken back at once by the slot's next task)."""
    die_with_parent(signal.SIGKILL)


@worker_process_init.connect
def freeze_what_was_imported(**kwargs) -> None:
    """Leave what the pool process was forked with (Django, the work kinds' libraries: half a million
    objects) out of every garbage collection from here on. A batch's full collections otherwise scan
    it all: a quarter of clean-table's time on a slot, against a sixth in a process without them."""
    gc.freeze()


@worker_ready.connect
def tell_the_supervisor(sender, **kwargs) -> None:
    """A slot's worker consumes its queue now: `gpuworker` counts the slot online from here, so no hold
    starts, and nothing is metered, while the worker is still starting."""
    if ready_file := os.environ.get("E31_READY_FILE"):
        Path(ready_file).write_text(str(os.getpid()))
