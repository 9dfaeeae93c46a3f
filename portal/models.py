"""Organisations, their members, and design-partner applications."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class TimeStamped(models.Model):
    created = models.DateTimeField(default=timezone.now, editable=False)
    modified = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class Organisation(TimeStamped):
    name = models.CharField(max_length=200, unique=True)
    slug = models.SlugField(max_length=60, unique=True)
    # The operators' levers on the queue (jobs.scheduling): a weight in the fair share between
    # organisations, and quotas, as Slurm's QOS and Kueue's cluster queues give.
    share_weight = models.DecimalField(
        max_digits=6, decimal_places=2, default=1, db_default=1,
        help_text="Its weight in the fair share of the fleet: 2 gets twice the slots of 1 when both wait.",
    )  # fmt: skip
    max_slots_held = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many slots held at once by its jobs; empty: no cap."
    )
    monthly_spend_cap = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True,
        help_text="At most this much charged in a calendar month (UTC), its jobs' budgets counted; empty: no cap.",
    )  # fmt: skip

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(TimeStamped):
    """A user's place in one organisation: everything they see is that organisation's."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    organisation = models.ForeignKey(Organisation, on_delete=models.CASCADE, related_name="memberships")

    def __str__(self) -> str:
        return f"{self.user} in {self.organisation}"


def organisation_for(user) -> Organisation | None:
    """The organisation a signed-in partner belongs to; None for operators and visitors."""
    membership = getattr(user, "membership", None) if user.is_authenticated else None
    return membership.organisation if membership else None


class Application(TimeStamped):
    """A team asking to join the design-partner program, reviewed by an operator in the admin."""

    class Status(models.TextChoices):
        NEW = "new", "New"
        ACCEPTED = "accepted", "Accepted"
        DECLINED = "declined", "Declined"

    name = models.CharField("your name", max_length=200)
    email = models.EmailField("work email")
    organisation = models.CharField("organisation", max_length=200)
    dataset = models.TextField("the dataset", max_length=4000, help_text="What it is, how many records, how many GB.")
    work = models.TextField("the pass", max_length=4000, help_text="What you want to run over every record.")
    gpu_hours = models.PositiveIntegerField("GPU-hours you expect", null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.NEW)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.organisation} ({self.email})"

    def review(self, status: str, by) -> None:
        self.status = status
        self.reviewed_by = by
        self.reviewed_at = timezone.now()
        self.save(update_fields=["status", "reviewed_by", "reviewed_at", "modified"])


class RequestKey(models.Model):
    """A create sent under a key (the API's Idempotency-Key, a form's one-time token) and, once it is made, the
    first request's answer, sealed (it may hold a secret shown once): the same key again gets that answer and
    makes nothing more. Kept a day (portal.idempotency)."""

    owner = models.CharField(max_length=40)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    created = models.DateTimeField(default=timezone.now, db_index=True)
    answer = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "key"], name="one_request_per_key")]

    def __str__(self) -> str:
        return f"{self.key} of {self.owner}"
