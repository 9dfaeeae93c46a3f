"""RateCard, RetentionPolicy and LedgerEntry. Ledger entries are appended to a hash chain per
organisation and never updated or deleted."""

from contextvars import ContextVar
from decimal import Decimal
from functools import partial

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models, transaction
from django.db.models.signals import pre_save
from django.dispatch import receiver
from django.utils import timezone

from billing import anchor
from billing.chain import entry_hash
from jobs.models import Job
from portal.models import Organisation, TimeStamped

# What an amount is written to, in the ledger and wherever a cost is shown beside it: a 0.0021 USD job is not 0.00.
MONEY = Decimal("0.0001")


class RateCard(TimeStamped):
    """The price of one GPU-hour from a moment on; the newest card in force prices a hold."""

    rate_per_gpu_hour = models.DecimalField(
        "rate per GPU-hour", max_digits=10, decimal_places=4, validators=[MinValueValidator(0)]
    )
    rate_per_staged_gb = models.DecimalField(
        "rate per GB staged",
        max_digits=10,
        decimal_places=4,
        default=0,
        validators=[MinValueValidator(0)],
        help_text="Charged per GB (10⁹ bytes) staged; 0 stages for free.",
    )
    currency = models.CharField(max_length=3, default="USD")
    effective_from = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-effective_from"]

    def __str__(self) -> str:
        return f"{self.rate_per_gpu_hour} {self.currency}/GPU-hour from {self.effective_from:%Y-%m-%d %H:%M}"

    @classmethod
    def in_force(cls, at=None) -> "RateCard | None":
        return cls.objects.filter(effective_from__lte=at or timezone.now()).order_by("-effective_from").first()

    def price(self, gpu_hours: Decimal) -> Decimal:
        """What these GPU-hours cost at this card's rate, to the MONEY quantum."""
        return (gpu_hours * self.rate_per_gpu_hour).quantize(MONEY)


class RetentionPolicy(TimeStamped):
    """The operators' limits on retention for the jobs submitted from a moment on: for every
    organisation, or for one (whose own policy then stands in for the general one). A job keeps the
    days it chose under the policy in force when it was submitted. Without any policy, the settings
    E31_MAX_RETENTION_DAYS, E31_OUTPUT_KEEP_DAYS and E31_MAX_OUTPUT_KEEP_DAYS are the policy."""

    organisation = models.ForeignKey(
        Organisation,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="retention_policies",
        help_text="Empty: every organisation without a policy of its own.",
    )
    max_staged_days = models.PositiveIntegerField(
        "longest a staged copy is kept (days)",
        help_text="0: every staged copy is deleted when its job ends, a sample's too.",
    )
    output_days = models.PositiveIntegerField(
        "days an output is kept", validators=[MinValueValidator(1)], help_text="Unless the partner chooses otherwise."
    )
    max_output_days = models.PositiveIntegerField("longest an output is kept (days)", validators=[MinValueValidator(1)])
    effective_from = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-effective_from"]
        verbose_name_plural = "retention policies"

    def __str__(self) -> str:
        return f"Retention for {self.organisation or 'every organisation'} from {self.effective_from:%Y-%m-%d %H:%M}"

    def clean(self) -> None:
        if self.output_days and self.max_output_days and self.output_days > self.max_output_days:
            raise ValidationError({"output_days": f"At most the longest an output is kept, {self.max_output_days}."})

    @classmethod
    def in_force(cls, organisation: Organisation | None, at=None) -> "RetentionPolicy":
        """The organisation's own newest policy in force, else the general one, else the settings'."""
        policies = cls.objects.filter(effective_from__lte=at or timezone.now()).order_by("-effective_from")
        own = policies.filter(organisation=organisation).first() if organisation else None
        return (
            own
            or policies.filter(organisation=None).first()
            or cls(
                max_staged_days=settings.E31_MAX_RETENTION_DAYS,
                output_days=settings.E31_OUTPUT_KEEP_DAYS,
                max_output_days=settings.E31_MAX_OUTPUT_KEEP_DAYS,
            )
        )

    @property
    def sample_keep_days(self) -> int:
        """How long a sample keeps its staged copy for the full pass: E31_SAMPLE_KEEP_DAYS, within the limit."""
        return min(settings.E31_SAMPLE_KEEP_DAYS, self.max_staged_days)


# The entry LedgerEntry.objects.append is saving in this thread or task, if any.
_appending: ContextVar["LedgerEntry | None"] = ContextVar("ledger_appending", default=None)


class LedgerEntryQuerySet(models.QuerySet):
    """Entries come in one way, `append`; every route that would rewrite or invent one is refused here,
    and the database's triggers refuse the routes around the ORM (migration 0008)."""

    def append(self, **fields) -> tuple["LedgerEntry", bool]:
        """A new entry at the end of its organisation's chain; for a hold or a staging, the job's one
        entry of that kind if it is already written (False then). The organisation's row is locked
        first, so two writers for one organisation take turns and cannot fork its chain. Once the
        entry commits, the chain's new head is written to a checkpoint outside the database (billing.anchor)."""
        entry = self.model(**fields)
        entry.full_clean(exclude=["previous_hash", "hash"], validate_unique=False, validate_constraints=False)
        with transaction.atomic(using=self.db):
            organisation = self.lock_chain(entry.organisation_id)
            if entry.kind != LedgerEntry.Kind.CORRECTION:
                written = self.filter(job_id=entry.job_id, kind=entry.kind).first()
                if written:
                    return written, False
            last = self.filter(organisation_id=entry.organisation_id).order_by("-pk").first()
            entry.previous_hash = last.hash if last else ""
            entry.hash = entry_hash(entry)
            # Past LedgerEntry.save, which refuses every other caller; refuse_saves_but_append lets it by.
            appending = _appending.set(entry)
            try:
                models.Model.save(entry, force_insert=True, using=self.db)
            finally:
                _appending.reset(appending)
            # Counted under the lock: the entries before this one are all committed, none comes in meanwhile.
            entries = self.filter(organisation_id=entry.organisation_id).count()
            head = anchor.Head(organisation.slug, entries, entry.hash, entry.created)
            # On commit, never before: a checkpoint of an entry rolled back would read as an entry deleted.
            transaction.on_commit(partial(anchor.record, entry.organisation_id, head), using=self.db)
        return entry, True

    def lock_chain(self, organisation_id: int) -> Organisation:
        """Lock the organisation's row until the transaction ends: its chain has one writer at a time.
        (SQLite's transactions take the database's write lock up front: transaction_mode IMMEDIATE.)"""
        return Organisation.objects.using(self.db).select_for_update().get(pk=organisation_id)

    def update(self, **kwargs):
        raise TypeError("Ledger entries are never updated: a correction is a new entry.")

    def delete(self):
        raise TypeError("Ledger entries are never deleted: a correction is a new entry.")

    def bulk_update(self, objs, fields, batch_size=None):
        raise TypeError("Ledger entries are never updated: a correction is a new entry.")

    def bulk_create(self, objs, *args, **kwargs):
        raise TypeError("Ledger entries are appended one at a time, through LedgerEntry.objects.append.")


class LedgerEntry(models.Model):
    """One line of an organisation's ledger, chained to the line before it by its hash: what a job's
    hold or staging cost, or an operator's correction of it. Written once, never changed."""

    class Kind(models.TextChoices):
        HOLD = "hold", "Hold"  # of GPUs or of CPU slots: a page says which
        STAGING = "staging", "Staging"
        CORRECTION = "correction", "Correction"

    organisation = models.ForeignKey(Organisation, on_delete=models.PROTECT, related_name="ledger_entries")
    job = models.ForeignKey("jobs.Job", on_delete=models.PROTECT, related_name="ledger_entries")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    gpus = models.PositiveIntegerField(help_text="0 for staging and corrections: no GPU is held then.")
    held_from = models.DateTimeField(help_text="When the hold (or the staging) started; a correction's moment.")
    held_to = models.DateTimeField()
    seconds = models.PositiveBigIntegerField(help_text="Seconds held (or staging), counted per started second.")
    bytes = models.PositiveBigIntegerField(null=True, blank=True, help_text="Bytes staged (staging entries).")
    source_kind = models.CharField(
        max_length=10, blank=True, choices=Job.Source.choices, help_text="Where the data came from (staging entries)."
    )
    gpu_hours = models.DecimalField(max_digits=14, decimal_places=6)
    rate = models.DecimalField(max_digits=10, decimal_places=4)
    currency = models.CharField(max_length=3)
    amount = models.DecimalField(max_digits=14, decimal_places=4, help_text="Negative for a credit.")
    reason = models.TextField(blank=True, help_text="Why the operator made the correction (corrections).")
    recorded_by = models.CharField(max_length=150, blank=True, help_text="The operator who made the correction.")
    created = models.DateTimeField(default=timezone.now, editable=False)
    previous_hash = models.CharField(
        max_length=64, blank=True, editable=False, help_text="The organisation's previous entry's hash; empty first."
    )
    hash = models.CharField(
        max_length=64, unique=True, editable=False, help_text="HMAC-SHA256 sealing this entry, under E31_LEDGER_KEY."
    )

    objects = LedgerEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-held_to", "-pk"]
        verbose_name_plural = "ledger entries"
        # Related lookups and the deletion collector use the base manager: it refuses too.
        base_manager_name = "objects"
        constraints = [
            models.UniqueConstraint(
                fields=["job", "kind"], condition=~models.Q(kind="correction"), name="one_entry_per_job_and_kind"
            ),
            models.UniqueConstraint(fields=["organisation", "previous_hash"], name="one_chain_per_organisation"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of job {self.job_id}: {self.amount} {self.currency}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise TypeError("Ledger entries are never updated: a correction is a new entry.")
        raise TypeError("Ledger entries are appended through LedgerEntry.objects.append, which chains them.")

    def delete(self, *args, **kwargs):
        raise TypeError("Ledger entries are never deleted: a correction is a new entry.")

    @property
    def short_hash(self) -> str:
        """Enough of the hash to tell entries apart on a page; the full one goes beside it."""
        return self.hash[:12]


@receiver(pre_save, sender=LedgerEntry)
def refuse_saves_but_append(sender, instance: LedgerEntry, raw: bool, **kwargs) -> None:
    """Deserialisation (loaddata) saves through Model.save_base, past LedgerEntry.save: any save that
    is not append's own is refused here, before it reaches the database."""
    if _appending.get() is not instance:
        raise TypeError("Ledger entries are appended through LedgerEntry.objects.append, which chains them.")
