"""Signals other apps listen to: billing hears when a job's hold starts and when it is released."""

from django.dispatch import Signal

# sent with job, gpus, held_from
hold_started = Signal()
# sent with job, gpus, held_from, held_to
hold_released = Signal()
