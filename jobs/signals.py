"""Signals other apps listen to: billing hears when staging ends and when a hold is released."""

from django.dispatch import Signal

# sent when a job ends, with job, gpus (how many it held) and holds: (held_from, held_to) of each allocation
hold_released = Signal()
# sent with job, size (bytes staged), started, finished
staging_finished = Signal()
