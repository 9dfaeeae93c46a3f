"""Making one attempt of a delivery, and sending the attempts to the workers.

An attempt is claimed with a conditional UPDATE (pending, due, and no live lease): two messages for the same
delivery, or a message restored after a crash, make one attempt. Its outcome is written only while the claim
holds. The body is the one recorded with the delivery; the signature is made anew at each attempt:

    E31-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under the endpoint's secret>

The post goes through the SSRF guard of staging (jobs.staging.fetch.post): public addresses only (or
E31_STAGING_ALLOWED_HOSTS), the address checked and pinned, no redirect followed. An attempt answered 2xx
delivers; any other ends with the next one due after E31_WEBHOOK_RETRY_SECONDS[n]; after the last, failed."""

import hashlib
import hmac
import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from api.webhooks.models import Attempt, Delivery
from jobs import enqueue
from jobs.staging import fetch

TIMEOUT_SECONDS = 10
# Longer than an attempt can take (the task's time limit): a lease that lapses is a crashed attempt's.
LEASE = timedelta(seconds=90)
# A retry due within this many seconds is sent with a countdown; a later one is sent by the sweep, since the
# broker (Redis) may hand a message held unacknowledged past its visibility timeout to a second worker.
COUNTDOWN_AT_MOST = 300
# The sweep sends what has been due this long without an attempt: a message sent moments ago is not doubled.
SWEEP_GRACE = timedelta(seconds=60)
USER_AGENT = "e31-portal-webhooks"


def signature(secret: str, body: bytes, at: int) -> str:
    digest = hmac.new(secret.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={digest}"


def attempt(delivery_id: str) -> str | None:
    """Claim and make the delivery's next attempt; its outcome (the delivery's status after it), or None when
    it is not due, another worker has it, or it is no longer pending."""
    now = timezone.now()
    claim = uuid.uuid4().hex
    free = Q(lease_until=None) | Q(lease_until__lt=now)
    due = Delivery.objects.filter(free, pk=delivery_id, status=Delivery.Status.PENDING, next_attempt_at__lte=now)
    if not due.update(claim=claim, lease_until=now + LEASE, attempts=F("attempts") + 1, modified=now):
        return None
    delivery = Delivery.objects.select_related("endpoint").get(pk=delivery_id)
    if delivery.endpoint.removed_at is not None:
        _settle(delivery, claim, status=Delivery.Status.STOPPED)
        return Delivery.Status.STOPPED
    started = time.monotonic()
    http_status, error = _post(delivery)
    record = Attempt(
        delivery=delivery,
        number=delivery.attempts,
        at=now,
        http_status=http_status,
        error=error,
        duration_ms=round((time.monotonic() - started) * 1000),
    )
    retries = settings.E31_WEBHOOK_RETRY_SECONDS
    retry_in = None
    if record.succeeded:
        outcome = {"status": Delivery.Status.DELIVERED, "delivered_at": timezone.now(), "next_attempt_at": None}
    elif delivery.attempts > len(retries):
        outcome = {"status": Delivery.Status.FAILED, "next_attempt_at": None}
    else:
        retry_in = retries[delivery.attempts - 1]
        outcome = {"next_attempt_at": timezone.now() + timedelta(seconds=retry_in)}
    if not _settle(delivery, claim, record, **outcome):
        return None
    if retry_in is not None and retry_in <= COUNTDOWN_AT_MOST:
        send(delivery.pk, countdown=retry_in)
    return outcome.get("status", Delivery.Status.PENDING)


def _post(delivery: Delivery) -> tuple[int | None, str]:
    """The HTTP status the endpoint answered (None when nothing did) and, unless 2xx, why it failed."""
    body = delivery.body.encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "E31-Delivery": str(delivery.pk),
        "E31-Event": delivery.event,
        "E31-Signature": signature(delivery.endpoint.secret, body, int(time.time())),
    }
    try:
        posted = fetch.post(
            delivery.url, body, headers, allowed_hosts=settings.E31_STAGING_ALLOWED_HOSTS, timeout=TIMEOUT_SECONDS
        )
    except fetch.FetchError as error:
        return None, str(error)
    if 200 <= posted.status < 300:
        return posted.status, ""
    return posted.status, f"HTTP {posted.status} {posted.reason}".rstrip()


def _settle(delivery: Delivery, claim: str, record: Attempt | None = None, **outcome) -> bool:
    """Write an attempt's outcome while its claim still holds; False when it lapsed and another took over."""
    with transaction.atomic():
        mine = Delivery.objects.filter(pk=delivery.pk, claim=claim)
        if not mine.update(claim="", lease_until=None, modified=timezone.now(), **outcome):
            return False
        if record is not None:
            record.save()
    return True


def stop_for(endpoint) -> int:
    """An endpoint removed: its deliveries still pending stop (an attempt under way finishes); how many."""
    pending = Delivery.objects.filter(endpoint=endpoint, status=Delivery.Status.PENDING)
    return pending.update(status=Delivery.Status.STOPPED, next_attempt_at=None, modified=timezone.now())


def sweep() -> int:
    """Send every delivery that has been due a while with no attempt under way: its message was lost (the
    broker was away, a worker died) or its retry was too far off for a countdown. How many were sent."""
    now = timezone.now()
    free = Q(lease_until=None) | Q(lease_until__lt=now)
    due = Delivery.objects.filter(free, status=Delivery.Status.PENDING, next_attempt_at__lte=now - SWEEP_GRACE)
    ids = list(due.order_by("next_attempt_at").values_list("pk", flat=True)[:1000])
    for delivery_id in ids:
        send(delivery_id)
    return len(ids)


def send(delivery_id, countdown: float | None = None) -> None:
    """Send an attempt to the workers by name, after commit. A send the broker refuses is logged and left to
    the sweep."""
    enqueue.send_on_commit(
        "api.webhooks.tasks.deliver", str(delivery_id), countdown=countdown, about="webhook delivery"
    )
