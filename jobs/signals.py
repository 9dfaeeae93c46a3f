"""Signals other apps listen to: billing hears when staging ends and when a hold is released."""

from django.dispatch import Signal

# sent with job, gpus, held_from, held_to
hold_released = Signal()
# sent with job, size (bytes staged), started, finished
staging_finished = Signal()
