"""From a job's change of state, or its deadline told it can no longer be met, to the deliveries it makes: one
per endpoint listening to the job, its body the job as the API shows it then, each sent to the workers once
recorded.

An event is recorded once per endpoint (a unique constraint): the receiver and `catch_up` may both see it."""

import json
import uuid
from datetime import datetime
from itertools import pairwise

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from api.representation import job_json
from api.webhooks import delivery
from api.webhooks.models import Delivery, Endpoint
from jobs.models import Job

EVENT = "job.state_changed"
AT_RISK = "job.deadline_at_risk"


def job_state_changed(sender, job_id: int, state: str, previous: str, at: datetime, **kwargs) -> None:
    """Hears jobs.signals.state_changed, after the change is committed."""
    job = Job.objects.filter(pk=job_id).first()
    endpoints = list(Endpoint.objects.listening_to(job)) if job else []
    if endpoints:
        record(job, endpoints, state, previous, at)


def job_deadline_at_risk(sender, job_id: int, at: datetime, **kwargs) -> None:
    """Hears jobs.signals.deadline_at_risk, once the job's note is committed."""
    job = Job.objects.filter(pk=job_id).first()
    endpoints = list(Endpoint.objects.listening_to(job)) if job else []
    if endpoints:
        _record(job, endpoints, AT_RISK, {"job": job_json(job)}, job.state, "", at)


def catch_up(endpoint: Endpoint) -> None:
    """A job's own endpoint, made just after the job: the changes the job went through before it existed,
    read off the timeline (a line whose state differs from the one before it is a change)."""
    events = list(endpoint.job.events.order_by("pk").values_list("state", "at"))
    for (previous, _), (state, at) in pairwise(events):
        if state != previous:
            record(endpoint.job, [endpoint], state, previous, at)


def record(job: Job, endpoints: list[Endpoint], state: str, previous: str, at: datetime) -> None:
    """The deliveries of one change to these endpoints, each sent to the workers once committed."""
    data = {"job": job_json(job), "state": state, "previous_state": previous}
    _record(job, endpoints, EVENT, data, state, previous, at)


def _record(job: Job, endpoints: list[Endpoint], event: str, data: dict, state: str, previous: str, at) -> None:
    """The deliveries of one event to these endpoints, each sent to the workers once committed."""
    now = timezone.now()
    deliveries = []
    for endpoint in endpoints:
        delivery_id = uuid.uuid4()
        body = {"id": str(delivery_id), "type": event, "created": now.isoformat(), "data": data}
        deliveries.append(
            Delivery(
                id=delivery_id,
                job=job,
                endpoint=endpoint,
                event=event,
                url=endpoint.url,
                state=state,
                previous_state=previous,
                changed_at=at,
                body=json.dumps(body, cls=DjangoJSONEncoder),
                next_attempt_at=now,
            )
        )
    with transaction.atomic():
        Delivery.objects.bulk_create(deliveries, ignore_conflicts=True)
        recorded = Delivery.objects.filter(pk__in=[found.pk for found in deliveries]).values_list("pk", flat=True)
        for delivery_id in recorded:
            delivery.send(delivery_id)
