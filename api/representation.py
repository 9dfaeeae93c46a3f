"""A job as the API gives it (docs/api.md), in plain JSON types: the answer to a created job or pass, and the
job in a webhook's body. The live figures are JobFacts', the job page's own.

Written on this branch before the read routes' own representation (same name, same fields) was merged; that
one replaces this file."""

from datetime import datetime
from decimal import Decimal

from django.urls import reverse

from billing.metering import Meter
from jobs.facts import JobFacts
from jobs.models import Job


def at(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _number(value: Decimal | None) -> str | None:
    """Decimals as strings, exact: hours, GPU-hours and money."""
    return None if value is None else str(value)


def job_url(job: Job) -> str:
    return f"{reverse('api:index')}jobs/{job.pk}/"


def job_json(job: Job, facts: JobFacts | None = None) -> dict:
    """The job with its live figures. `facts` is the one reading of the job (JobFacts(job) if not given)."""
    facts = facts or JobFacts(job)
    progress = facts.progress
    url = job_url(job)
    return {
        "id": job.pk,
        "url": url,
        "page": reverse("jobs:detail", args=[job.pk]),
        "kind": job.kind,
        "work": job.work,
        "params": job.params,
        "state": job.state,
        "state_display": job.get_state_display(),
        "on_hold": job.on_hold,
        "on_hold_reason": job.on_hold_reason if job.on_hold else "",
        "error": job.error,
        "data": {
            "source_kind": job.source_kind,
            "name": job.source_name,
            "location": job.source_location,
            "bytes": job.input_bytes,
            "sha256": job.input_sha256,
            "format": job.input_format,
        },
        "request": {
            "gpus": job.gpus,
            "hours": _number(job.hours),
            "shape": job.shape,
            "deadline": at(job.deadline),
            "allow_partial": job.allow_partial,
        },
        "retention": {
            "staged_days": job.retention_days,
            "output_days": job.output_keep_days,
            "staged_purge_at": at(facts.purge_due),
            "output_purge_at": at(facts.output_due),
            "staged_purged_at": at(job.staged_purged_at),
            "output_purged_at": at(job.output_purged_at),
        },
        "created": at(job.created),
        "queued_at": at(job.queued_at),
        "started_at": at(job.started_at),
        "ended_at": at(job.ended_at),
        "progress": {
            "records_done": progress.records_done,
            "records_total": progress.records_total,
            "percent": progress.percent,
            "records_per_second": progress.records_per_second,
            "eta_seconds": progress.eta_seconds,
            "staging_percent": job.staging_percent,
        },
        "queue": {"place": facts.queue_position, "latest_start": at(facts.latest_start)},
        "meter": meter_json(facts.meter),
        "output": {
            "files": [{"name": name, "url": f"{url}output/{name}"} for name in facts.output_files],
            "manifest": f"{url}manifest/" if "manifest.json" in facts.output_files else None,
        },
        "sample": {"of": job.sample_id, "result": job.sample_result},
    }


def meter_json(meter: Meter | None) -> dict | None:
    if meter is None:
        return None
    return {
        "gpu_hours": _number(meter.gpu_hours),
        "amount": _number(meter.amount),
        "currency": meter.currency,
        "rate": _number(meter.rate),
    }
