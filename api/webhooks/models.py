"""Where webhooks go and what became of each: an Endpoint (the organisation's, or one job's own URL), a
Delivery per event per endpoint (a state change, or a deadline that can no longer be met; its body kept as it
is signed and sent again), an Attempt per try."""

import secrets
import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from jobs.models import Job
from portal import crypto
from portal.models import Organisation, TimeStamped

SEALED_FOR = "e31 webhook secrets"


def new_secret() -> str:
    return f"whsec_{secrets.token_hex(32)}"


class EndpointQuerySet(models.QuerySet):
    def of_organisation(self, organisation: Organisation) -> "EndpointQuerySet":
        """The organisation's own endpoints (not a job's), not removed."""
        return self.filter(organisation=organisation, job=None, removed_at=None)

    def listening_to(self, job: Job) -> "EndpointQuerySet":
        """The endpoints a change of the job's state goes to: its organisation's and its own."""
        return self.filter(Q(job=None) | Q(job=job), organisation_id=job.organisation_id, removed_at=None)


class Endpoint(TimeStamped):
    """A URL that hears every state change of the organisation's jobs, or of one job (`job`). Its secret signs
    each delivery: sealed (portal.crypto), since signing needs it back; shown once, when it is made."""

    organisation = models.ForeignKey(Organisation, on_delete=models.CASCADE, related_name="+")
    job = models.OneToOneField(Job, null=True, blank=True, on_delete=models.CASCADE, related_name="webhook")
    url = models.CharField(max_length=2000)
    sealed_secret = models.TextField(editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    removed_at = models.DateTimeField(null=True, blank=True)

    objects = EndpointQuerySet.as_manager()

    class Meta:
        ordering = ["created", "pk"]

    def __str__(self) -> str:
        return f"{self.url} ({f'job {self.job_id}' if self.job_id else self.organisation})"

    @property
    def secret(self) -> str:
        return crypto.unseal(SEALED_FOR, self.sealed_secret).decode()

    @secret.setter
    def secret(self, value: str) -> None:
        self.sealed_secret = crypto.seal(SEALED_FOR, value.encode())


class Delivery(TimeStamped):
    """One event of a job (a state change, or its deadline at risk), for one endpoint: pending until an attempt
    is answered 2xx (delivered), all attempts fail (failed), or the endpoint is removed (stopped). An attempt is
    claimed by a conditional UPDATE (`claim`, `lease_until`), so two workers never post the same attempt and a
    crashed one is taken over."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"
        STOPPED = "stopped", "Stopped"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="webhook_deliveries")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="deliveries")
    url = models.CharField(max_length=2000, help_text="The endpoint's URL when the change happened.")
    event = models.CharField(max_length=32, default="job.state_changed", help_text="What happened to the job.")
    state = models.CharField(max_length=10, help_text="The state the job entered, or was in when told.")
    previous_state = models.CharField(max_length=10, blank=True)
    changed_at = models.DateTimeField(help_text="When the job entered it.")
    body = models.TextField(help_text="The JSON posted, the same at every attempt.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0, help_text="Attempts claimed, a crashed one included.")
    next_attempt_at = models.DateTimeField(null=True, blank=True, default=timezone.now)
    claim = models.CharField(max_length=32, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-changed_at", "-created"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "job", "event", "state", "changed_at"], name="one_delivery_per_event"
            )
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="webhook_delivery_due")]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.previous_state} → {self.state} to {self.url} ({self.status})"


class Attempt(models.Model):
    """One try of a delivery: the HTTP status answered (none when nothing answered), why it failed, how long
    it took."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)
    http_status = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField()

    class Meta:
        ordering = ["number", "pk"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}: {self.http_status or self.error}"

    @property
    def succeeded(self) -> bool:
        return self.http_status is not None and 200 <= self.http_status < 300
