"""How far a job's staging has got, written to the job for its page at most twice a second; a job
cancelled meanwhile stops its staging at the next write."""

import time

from django.utils import timezone

from jobs.models import Job, State

INTERVAL = 0.5


class StagingStopped(Exception):
    """The job left staging (it was cancelled) while its data was being staged."""


class StagingProgress:
    def __init__(self, job_id: int):
        self.job_id = job_id
        self.written = 0.0
        self.done = 0

    def phase(self, name: str, total: int | None) -> None:
        """Start a phase of staging (downloading, copying, reading) over `total` bytes, if known."""
        self.done = 0
        self.written = time.monotonic()
        Job.objects.filter(pk=self.job_id).update(
            staging_phase=name, staging_done=0, staging_total=total, staging_phase_started=timezone.now()
        )

    def advance(self, done: int) -> None:
        self.done = done
        if time.monotonic() - self.written >= INTERVAL:
            self.flush()

    def flush(self) -> None:
        """Write the bytes done; StagingStopped when the job is no longer staging, to stop the copy."""
        self.written = time.monotonic()
        if not Job.objects.filter(pk=self.job_id, state=State.STAGING).update(staging_done=self.done):
            raise StagingStopped
