"""A job, its timeline and a receipt as the API gives them (docs/api.md), in plain JSON types, so that the
routes and the webhooks (which send the job as GET /api/v1/jobs/<id>/ does) write the same thing. The live
figures are JobFacts', the job page's own: nothing here computes a figure a second way."""

from datetime import datetime
from decimal import Decimal

from django.urls import reverse

from billing.metering import Meter
from billing.models import MONEY, RateCard
from jobs.facts import JobFacts
from jobs.models import Job, JobEvent, State

HOURS = Decimal("0.01")


def at(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _number(value: Decimal | None) -> str | None:
    """Decimals as strings, exact: hours, GPU-hours and money."""
    return None if value is None else str(value)


def job_json(job: Job, facts: JobFacts | None = None) -> dict:
    """The job with its live figures. `facts` is the one reading of the job (JobFacts(job) if not given)."""
    facts = facts or JobFacts(job)
    progress = facts.progress
    return {
        "id": job.pk,
        "url": reverse("api:job", args=[job.pk]),
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
            "parts": job.parts_shown,
            "bytes": job.input_bytes,
            "compression": job.input_compression or None,
            "sent_bytes": job.sent_bytes,
            "sha256": job.input_sha256,
            "format": job.input_format,
        },
        "request": {
            "gpus": job.gpus,
            "hours": _number(job.hours),
            "shape": job.shape,
            "kind": job.request,
            "max_gpus": job.width_cap,
            "deadline": at(job.deadline),
            "allow_partial": job.allow_partial,
        },
        "deadline_feasible": job.deadline_feasible,
        "deadline_at_risk": _at_risk(job),
        "expected_start": at(facts.expected_start),
        "expected_finish": at(facts.expected_finish),
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
            "streaming": job.streaming,
            "staged_bytes": job.staging_done if job.streaming or job.state == State.STAGING else job.input_bytes,
        },
        "queue": {"place": facts.queue_position, "latest_start": at(facts.latest_start)},
        "meter": meter_json(facts.meter),
        "output": output_json(job, facts.output_files),
        "sample": {"of": job.sample_id, "result": job.sample_result},
    }


def checked_json(job: Job) -> dict:
    """A job a dry run of the create found acceptable, as it would be made (unsaved): its parts as the job
    shows them, and the most its request can cost, every GPU held for all the hours asked, at the rate in force."""
    card = RateCard.in_force()
    hours = Decimal(job.hours).quantize(HOURS)  # as the job made holds them
    gpu_hours = job.gpus * hours
    return {
        "dry_run": True,
        "kind": job.kind,
        "work": job.work,
        "params": job.params,
        "data": {
            "source_kind": job.source_kind,
            "name": job.source_name,
            "location": job.source_location,
            "parts": job.parts_shown,
            "sha256": job.expected_sha256,
            "format": job.input_format,
        },
        "request": {
            "gpus": job.gpus,
            "hours": _number(hours),
            "shape": job.shape,
            "kind": job.request,
            "max_gpus": job.width_cap,
            "deadline": at(job.deadline),
            "allow_partial": job.allow_partial,
        },
        "deadline_feasible": job.deadline_feasible,
        "expected_start": at(job.expected_start),
        "expected_finish": at(job.expected_finish),
        "retention": {"staged_days": job.retention_days, "output_days": job.output_keep_days},
        "most_cost": {
            "gpu_hours": _number(gpu_hours),
            "amount": _number(card and (gpu_hours * card.rate_per_gpu_hour).quantize(MONEY)),
            "currency": card.currency if card else None,
            "rate": _number(card and card.rate_per_gpu_hour),
        },
        "sample": {"result": job.sample_result},
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


def output_json(job: Job, names: list[str]) -> dict:
    files = [{"name": name, "url": reverse("api:output_file", args=[job.pk, name])} for name in names]
    manifest = reverse("api:manifest", args=[job.pk]) if "manifest.json" in names else None
    return {"files": files, "manifest": manifest}


def event_json(event: JobEvent) -> dict:
    return {"at": at(event.at), "state": event.state, "message": event.message}


def _at_risk(job: Job) -> dict | None:
    """A job told at submit that its deadline could be met, told since that it no longer can; None else."""
    if job.deadline_at_risk_since is None:
        return None
    return {
        "since": at(job.deadline_at_risk_since),
        "reason": job.deadline_at_risk_reason,
        "expected_finish": at(job.deadline_at_risk_finish),
        "message": job.deadline_at_risk,
    }
