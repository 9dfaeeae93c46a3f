"""Jobs in the state a test starts from, in one call: the fields a job in that state has, and the
test's own on top. A running job is made by lifecycle.start_hold on slots, not here: its holds are
what the test is about."""

from decimal import Decimal

from django.utils import timezone

from jobs import processors
from jobs.models import ENDED, Job, State


def make_job(organisation, state: str = State.SUBMITTED, **fields) -> Job:
    """A clean-table job with its default parameters over a.csv, asking for 1 GPU for 1 hour, in
    `state`: queued since now if queued, ended now if ended, unless `fields` say otherwise."""
    now = timezone.now()
    job = {
        "organisation": organisation,
        "work": "clean-table",
        "params": processors.get("clean-table").validate_params({}),
        "source_name": "a.csv",
        "gpus": 1,
        "hours": 1,
        "state": state,
    }
    if state == State.QUEUED:
        job["queued_at"] = now
    if state in ENDED:
        job["ended_at"] = now
    return Job.objects.create(**{**job, **fields})


def finished_sample(organisation, **fields) -> Job:
    """A sample of data.csv that succeeded: 600 of its 36,000 records at 10 a second, its staged copy kept."""
    sample = {
        "kind": Job.Kind.SAMPLE, "hours": Decimal("0.05"), "source_name": "data.csv",
        "staged_path": "jobs/0/input/data.csv", "records_total": 36_000,
        "sample_result": {
            "records": 600, "seconds": 60.0, "records_per_second": 10.0, "startup_seconds": 0.0,
            "records_total": 36_000, "slot": "CPU slot 0 on fake-node", "peak_memory_mb": 120,
        },
    }  # fmt: skip
    return make_job(organisation, fields.pop("state", State.SUCCEEDED), **{**sample, **fields})
