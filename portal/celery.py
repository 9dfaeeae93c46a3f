"""The Celery app: workers and beat read their settings from Django's (CELERY_* names)."""

import os

from celery import Celery
from celery.signals import worker_init

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
