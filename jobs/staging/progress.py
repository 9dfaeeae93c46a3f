"""How far a job's staging has got, written to the job for its page at most twice a second. Each
write renews the staging attempt's lease; an attempt whose job was cancelled, or taken over by
another attempt after its lease ran out, stops at its next write. A job whose staging streams into
its pass is queued or running meanwhile (jobs.staging.streaming)."""

import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from jobs.models import STAGING, Job

INTERVAL = 0.5


class StagingStopped(Exception):
    """The job left staging (it was cancelled), or another attempt took its staging over."""


def lease_end():
    return timezone.now() + timedelta(seconds=settings.E31_STAGING_LEASE_SECONDS)


class StagingProgress:
    def __init__(self, job_id: int, claim: str):
        self.job_id = job_id
        self.claim = claim
        self.written = 0.0
        self.done = 0
        self.total: int | None = None

    def _update(self, **fields) -> None:
        owned = Job.objects.filter(STAGING, pk=self.job_id, staging_claim=self.claim)
        if not owned.update(staging_lease_until=lease_end(), **fields):
            raise StagingStopped

    def phase(self, name: str, total: int | None) -> None:
        """Start a phase of staging (downloading, copying, reading) over `total` bytes, if known."""
        self.done, self.total = 0, total
        self.written = time.monotonic()
        self._update(staging_phase=name, staging_done=0, staging_total=total, staging_phase_started=timezone.now())

    def advance(self, done: int) -> None:
        self.done = done
        if time.monotonic() - self.written >= INTERVAL:
            self.flush()

    def flush(self) -> None:
        """Write the bytes done; StagingStopped when this attempt no longer stages the job."""
        self.written = time.monotonic()
        self._update(staging_done=self.done)
