"""Signals other apps listen to: billing hears when staging ends and when a hold starts and ends."""

from django.dispatch import Signal

# sent with job, gpus, held_from
hold_started = Signal()
# sent with job, gpus, held_from, held_to
hold_released = Signal()
# sent with job, size (bytes staged), started, finished
staging_finished = Signal()
