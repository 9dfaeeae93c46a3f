"""What a Celery pool process does once it is forked (portal.celery)."""

import subprocess
import sys

from tests.support import process_env

FORKED = """
import gc

import django

django.setup()
from celery.signals import worker_process_init

import portal.celery  # noqa: F401

tracked = len(gc.get_objects())
worker_process_init.send(sender=None)
print(tracked, gc.get_freeze_count(), len(gc.get_objects()))
"""


def test_it_leaves_what_it_was_forked_with_out_of_every_garbage_collection():
    """A slot's batches make garbage collections: they scan what the batch made, not Django and the work
    kinds' libraries again each time."""
    ended = subprocess.run(
        [sys.executable, "-c", FORKED], env=process_env(), check=True, capture_output=True, text=True, timeout=120
    )
    tracked, frozen, left = (int(word) for word in ended.stdout.split())
    assert tracked > 50_000  # Django and Celery, imported
    assert frozen >= tracked
    assert left < 1_000
