"""Job, Shard, Allocation, Node and Gpu: the tables of the job lifecycle in DESIGN.md."""

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.db.models import Exists, F, OuterRef, Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from portal import units
from portal.models import Organisation, TimeStamped
from portal.text import redacted


class State(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    STAGING = "staging", "Staging"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    FINISHING = "finishing", "Finishing"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"


OUTPUT_FILES = ("output.parquet", "rejects.csv", "manifest.json")  # in every output; a work kind may add more
ENDED = (State.SUCCEEDED, State.FAILED, State.CANCELLED, State.TIMED_OUT)
ACTIVE = (State.SUBMITTED, State.STAGING, State.QUEUED, State.RUNNING, State.FINISHING)
# Jobs whose staging goes on: staging, or queued or running while it streams into the pass (jobs.staging.streaming).
STAGING = Q(state=State.STAGING) | Q(streaming=True, state__in=(State.QUEUED, State.RUNNING))


class Node(TimeStamped):
    """A machine running `manage.py gpuworker`."""

    name = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=200)
    driver = models.CharField(max_length=100, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    work_kinds = models.JSONField(
        default=list, blank=True, help_text="The work kinds its slots can run (their libraries are installed)."
    )

    def __str__(self) -> str:
        return self.name


class GpuQuerySet(models.QuerySet):
    def online(self) -> "GpuQuerySet":
        cutoff = timezone.now() - timedelta(seconds=settings.E31_NODE_TIMEOUT_SECONDS)
        return self.filter(last_seen__gte=cutoff)

    def free(self) -> "GpuQuerySet":
        held = Allocation.objects.filter(gpu=OuterRef("pk"), held_to__isnull=True)
        return self.online().filter(~Exists(held))


class Gpu(TimeStamped):
    """One slot a job can hold: a GPU found by NVML, or a CPU slot on a machine without GPUs."""

    class Kind(models.TextChoices):
        GPU = "gpu", "GPU"
        CPU = "cpu", "CPU slot"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveIntegerField()
    kind = models.CharField(max_length=3, choices=Kind.choices)
    name = models.CharField(max_length=200)
    uuid = models.CharField(max_length=100, blank=True)
    memory_mb = models.PositiveIntegerField(null=True, blank=True)
    compute_capability = models.CharField(max_length=10, blank=True)
    queue = models.CharField(max_length=250, unique=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    utilisation = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Percent busy, at the last heartbeat."
    )
    memory_used_mb = models.PositiveIntegerField(null=True, blank=True, help_text="At the last heartbeat.")

    objects = GpuQuerySet.as_manager()

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="one_slot_per_index")]
        verbose_name = "GPU"

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        if self.kind == self.Kind.CPU:
            return f"CPU slot {self.index} on {self.node.name}"
        return f"GPU {self.index} ({self.name}) on {self.node.name}"


class AtRisk(models.TextChoices):
    """Why a deadline a job was told it could meet can no longer be met, as its page says it."""

    EARLIER_DEADLINE = "earlier_deadline", "a job with an earlier deadline, submitted after it, takes the GPUs first"
    FEWER_GPUS = "fewer_gpus", "fewer GPUs free up in time than when it was submitted"
    SLOWER = "slower", "its shards run slower than its request allowed for"


class Job(TimeStamped):
    class Shape(models.TextChoices):
        SHORT_WIDE = "short-wide", "Short-wide"
        LONG_NARROW = "long-narrow", "Long-narrow"

    class Kind(models.TextChoices):
        PASS = "pass", "Pass"
        SAMPLE = "sample", "Sample"

    class Request(models.TextChoices):
        FIXED = "fixed", "Fixed"
        FLEXIBLE = "flexible", "Flexible"

    organisation = models.ForeignKey(Organisation, on_delete=models.CASCADE, related_name="jobs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.SUBMITTED)
    error = models.TextField(blank=True)
    kind = models.CharField(
        max_length=6,
        choices=Kind.choices,
        default=Kind.PASS,
        help_text="A sample runs the work over a part of the data.",
    )
    sample = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="passes",
        help_text="The sample this pass was sized by; its staged copy is the pass's data.",
    )  # fmt: skip
    sample_result = models.JSONField(
        default=dict, blank=True, help_text="A sample's measurements: records, seconds, records per second, memory."
    )

    # work
    work = models.CharField(max_length=60)
    params = models.JSONField(default=dict, blank=True)
    model_path = models.CharField(max_length=500, blank=True, help_text="The partner's model file, in storage.")
    model_name = models.CharField(max_length=255, blank=True)
    model_source = models.CharField(
        max_length=2000, blank=True,
        help_text="Where the model came from: upload, its URL (without query), S3 URI or server path.",
    )  # fmt: skip
    model_sha256 = models.CharField(max_length=64, blank=True, help_text="The model file's, when it was stored.")
    plan = models.JSONField(default=dict, blank=True, help_text="What the processor decided while staging.")

    # data
    class Source(models.TextChoices):
        UPLOAD = "upload", "Upload"
        URL = "url", "URL"
        PATH = "path", "Server path"
        S3 = "s3", "S3"

    source_kind = models.CharField(max_length=10, choices=Source.choices, default=Source.UPLOAD)
    source_name = models.CharField(max_length=255)
    source_path = models.CharField(max_length=500, blank=True, help_text="The upload, in storage.")
    source_uri = models.CharField(max_length=2000, blank=True, help_text="The URL, S3 URI or server path staged from.")
    source_secret = models.TextField(
        blank=True, help_text="Credentials for an S3 source, encrypted; wiped when staging ends."
    )
    source_parts = models.JSONField(
        default=list, blank=True,
        help_text="A dataset given as several locations, in order: each part's location (a URL's query wiped "
        "when staging ends), then once staged its bytes and SHA-256 as sent. Empty for one location; source_uri "
        "is the first.",
    )  # fmt: skip
    staged_path = models.CharField(max_length=500, blank=True)
    input_format = models.CharField(max_length=10, blank=True)
    layout = models.JSONField(default=dict, blank=True)
    input_bytes = models.BigIntegerField(null=True, blank=True, help_text="The data's bytes as staged: uncompressed.")
    input_sha256 = models.CharField(max_length=64, blank=True, help_text="The SHA-256 of the data's bytes as sent.")
    input_compression = models.CharField(
        max_length=5, blank=True, help_text="gzip, zstd or bzip2 when the data came compressed; staged uncompressed."
    )
    sent_bytes = models.BigIntegerField(null=True, blank=True, help_text="The compressed data's bytes as sent.")
    expected_sha256 = models.CharField(
        max_length=64, blank=True, help_text="The data's SHA-256 as the partner gave it; staging checks it."
    )
    staging_seconds = models.FloatField(null=True, blank=True)
    staging_phase = models.CharField(max_length=12, blank=True, help_text="downloading, copying or reading")
    staging_done = models.BigIntegerField(default=0, help_text="Bytes of the current staging phase done.")
    staging_total = models.BigIntegerField(null=True, blank=True, help_text="Bytes of the phase, when known.")
    staging_phase_started = models.DateTimeField(null=True, blank=True)
    staging_claim = models.CharField(max_length=32, blank=True, help_text="The staging attempt that owns the job.")
    staging_lease_until = models.DateTimeField(
        null=True, blank=True, help_text="Renewed while staging makes progress; past it, another attempt takes over."
    )
    records_total = models.BigIntegerField(null=True, blank=True)
    streaming = models.BooleanField(
        default=False,
        help_text="Staging still adds shards while the job is queued or running: the pass started on what is staged.",
    )
    stream_ready = models.BooleanField(
        default=False,
        help_text="While it streams: the staged shards would keep its GPUs busy until staging ends, so it may start.",
    )
    retention_days = models.PositiveIntegerField(default=0, help_text="0: delete the staged copy when the job ends.")
    allow_partial = models.BooleanField(
        default=False, help_text="A shard that uses all its attempts is left out (its records rejected), not fatal."
    )
    staged_purged_at = models.DateTimeField(null=True, blank=True)

    # request
    gpus = models.PositiveIntegerField("GPUs")
    hours = models.DecimalField(max_digits=7, decimal_places=2)
    shape = models.CharField(max_length=12, choices=Shape.choices, default=Shape.SHORT_WIDE)
    request = models.CharField(
        max_length=8, choices=Request.choices, default=Request.FIXED,
        help_text="Fixed: all its GPUs at once for its hours. Flexible: a budget of GPUs × hours, run on as many "
        "slots as are free up to its width cap, changed at shard boundaries.",
    )  # fmt: skip
    max_gpus = models.PositiveIntegerField(
        "width cap", null=True, blank=True, help_text="A flexible job runs on at most this many slots; empty: its GPUs."
    )
    deadline = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Done by then: a hold ends at the deadline at the latest, and a job still waiting then ends unheld.",
    )
    deadline_feasible = models.BooleanField(
        null=True, blank=True, help_text="Whether the queue let it finish by its deadline when it was submitted."
    )
    deadline_at_risk_since = models.DateTimeField(
        null=True, blank=True,
        help_text="When a job told at submit that its deadline could be met was told it no longer can (once).",
    )  # fmt: skip
    deadline_at_risk_reason = models.CharField(max_length=16, choices=AtRisk.choices, blank=True)
    deadline_at_risk_finish = models.DateTimeField(
        null=True, blank=True, help_text="Its expected finish when it was told its deadline can no longer be met."
    )
    expected_start = models.DateTimeField(null=True, blank=True, help_text="When it is expected to start.")
    expected_finish = models.DateTimeField(null=True, blank=True, help_text="When it is expected to end.")

    # timing
    queued_at = models.DateTimeField(null=True, blank=True)
    on_hold_since = models.DateTimeField(
        null=True, blank=True, help_text="Set while the operators keep the job from starting (an operator hold)."
    )
    on_hold_reason = models.CharField(max_length=300, blank=True, help_text="Why, as the partner reads it.")
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the current hold started.")
    held_before = models.DurationField(
        default=timedelta, help_text="How long earlier holds lasted (all their GPUs lost, the job queued again)."
    )
    budget_ends_at = models.DateTimeField(
        null=True, blank=True, help_text="A flexible job's: when its GPU-hours are spent at the width it runs at now."
    )
    ended_at = models.DateTimeField(null=True, blank=True)
    notified_at = models.DateTimeField(null=True, blank=True, help_text="When its end was emailed to its submitter.")

    # output
    output_path = models.CharField(max_length=500, blank=True)
    output_keep_days = models.PositiveIntegerField(
        default=30, help_text="Days the output is kept after the job ends, as the partner chose at submit."
    )
    output_purged_at = models.DateTimeField(null=True, blank=True)
    output_files = models.JSONField(default=list, blank=True, help_text="The names of the files in the output folder.")
    records_out = models.BigIntegerField(null=True, blank=True)
    records_rejected = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        indexes = [
            # The queue in its order, (queued_at, id): a pass reads its head without sorting the rest.
            models.Index(fields=["state", "queued_at", "id"], name="jobs_job_queue_order"),
            # An organisation's jobs, newest first, a page at a time (the jobs page, the API's list).
            models.Index(fields=["organisation", "created"], name="job_organisation_created"),
        ]

    def __str__(self) -> str:
        return f"Job {self.pk} ({self.work})"

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def records_processed(self) -> int | None:
        """The records its output accounts for (out and rejected), once assembled: all of them for a job that
        succeeded, those its finished shards held for one cancelled or failed on the way."""
        if self.records_out is None:
            return None
        return self.records_out + (self.records_rejected or 0)

    @property
    def took_seconds(self) -> float | None:
        """From submitted to ended: the partner's wall time, staging and waiting included."""
        return max(0.0, (self.ended_at - self.created).total_seconds()) if self.ended_at else None

    @property
    def held_noun(self) -> str | None:
        """What the job held, in the product's words ("GPU" or "CPU slot"); None when it held nothing."""
        kinds = set(self.allocations.values_list("gpu__kind", flat=True))
        return ("CPU slot" if kinds == {Gpu.Kind.CPU} else "GPU") if kinds else None

    @property
    def params_given(self) -> dict:
        """The work parameters that have a value (a blank one takes the work's default)."""
        return {name: value for name, value in self.params.items() if value not in ("", None)}

    @property
    def on_hold(self) -> bool:
        """Kept from starting by the operators: it stages, and waits in its place in the queue."""
        return self.on_hold_since is not None and not self.ended

    @property
    def cancellable(self) -> bool:
        return self.state in (State.SUBMITTED, State.STAGING, State.QUEUED, State.RUNNING)

    @property
    def storage_prefix(self) -> str:
        return f"jobs/{self.pk}"

    @property
    def output_names(self) -> list[str]:
        """The files of the job's output, once there is one and until its retention is up."""
        if not self.output_path or self.output_purged_at:
            return []
        return list(self.output_files) or list(OUTPUT_FILES)

    @property
    def staging_rate(self) -> float | None:
        """Bytes per second of the current staging phase."""
        if not self.staging_phase_started or not self.staging_done:
            return None
        elapsed = (timezone.now() - self.staging_phase_started).total_seconds()
        return self.staging_done / elapsed if elapsed > 0 else None

    @property
    def sample_was_whole(self) -> bool:
        """A sample that ran over every record: its output is what the full pass would give."""
        result = self.sample_result or {}
        return bool(result.get("records_total")) and result.get("records", 0) >= result["records_total"]

    @property
    def staged_so_far(self) -> str:
        """How much of its data is staged, in words: a percent of it where its size is known ("40 %"), else
        its bytes so far ("12.5 MB": a dataset of several parts is known in size only once every part is in)."""
        percent = self.staging_percent
        return f"{percent} %" if percent is not None else units.size(self.staging_done or 0)

    @property
    def staging_percent(self) -> int | None:
        """How far staging has got: 100 once the job is queued (its data staged, or a sample's taken over), unless
        its staging streams into its pass and goes on."""
        if self.queued_at is not None and not self.streaming:
            return 100
        if not self.staging_total:
            return None
        return min(100, int(100 * self.staging_done / self.staging_total))

    @property
    def staging_eta(self) -> float | None:
        rate = self.staging_rate
        if not rate or not self.staging_total:
            return None
        return max(0.0, (self.staging_total - self.staging_done) / rate)

    @property
    def source_location(self) -> str:
        """The URL, S3 URI or server path as pages and manifests show it: never a URL's query."""
        return redacted(self.source_uri) if self.source_kind == self.Source.URL else self.source_uri

    @property
    def parts_shown(self) -> list[dict]:
        """The dataset's parts as pages, the API and manifests show them: each location without a URL's query,
        with its bytes and SHA-256 as sent and its compression once staged (None before, and for none)."""
        shown = redacted if self.source_kind == self.Source.URL else str
        return [
            {
                "location": shown(part["location"]),
                "bytes": part.get("bytes"),
                "sha256": part.get("sha256"),
                "compression": part.get("compression"),
            }
            for part in self.source_parts
        ]

    @property
    def staging_mb_per_s(self) -> float | None:
        """How fast the whole staging went, once it is done."""
        return self.input_bytes / 1e6 / self.staging_seconds if self.staging_seconds else None

    @property
    def flexible(self) -> bool:
        return self.request == self.Request.FLEXIBLE

    @property
    def width_cap(self) -> int:
        """The most slots it runs on at once: its GPUs for a fixed request, its cap for a flexible one."""
        return (self.max_gpus or self.gpus) if self.flexible else self.gpus

    @property
    def budget_gpu_seconds(self) -> int:
        """What it may hold in all: its GPUs × its hours (a flexible job's budget, at any width)."""
        return int(self.gpus * self.hours * 3600)

    def time_limit_at(self):
        """When the hold must end: the hours asked for are up (the hours held in all, earlier holds
        included; for a flexible job, its GPU-hours spent at the width it runs at now), or the deadline
        has come, whichever is first."""
        if self.started_at is None:
            return None
        if self.flexible:
            limit = self.budget_ends_at or self.started_at
        else:
            limit = self.started_at + timedelta(hours=float(self.hours)) - self.held_before
        return min(limit, self.deadline) if self.deadline else limit

    @property
    def deadline_at_risk(self) -> str:
        """What a job told at submit that its deadline could be met is told once it no longer can; blank before."""
        if self.deadline_at_risk_since is None:
            return ""
        why = AtRisk(self.deadline_at_risk_reason).label
        finish = self.deadline_at_risk_finish
        return (
            f"Your deadline of {self.deadline:%Y-%m-%d %H:%M} UTC can no longer be met: {why}. "
            f"Expected finish {finish:%Y-%m-%d %H:%M} UTC."
        )

    def deadline_passed(self, now=None) -> bool:
        return self.deadline is not None and (now or timezone.now()) >= self.deadline

    def time_limit_passed(self, now=None) -> bool:
        if self.state != State.RUNNING or self.started_at is None:
            return False
        return (now or timezone.now()) >= self.time_limit_at()


class JobEvent(models.Model):
    """One row of a job's timeline: each state it entered, when, and why; or an operator's hold put on it or
    lifted, under the state it was in."""

    class Hold(models.TextChoices):
        PUT = "put", "On hold"
        LIFTED = "lifted", "Hold lifted"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    state = models.CharField(max_length=10, choices=State.choices)
    at = models.DateTimeField(default=timezone.now)
    message = models.TextField(blank=True)
    hold = models.CharField(max_length=6, choices=Hold.choices, blank=True)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.state} at {self.at:%Y-%m-%d %H:%M:%S}"


class Shard(TimeStamped):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"  # used all its attempts in a job that allows partial output
        SKIPPED = "skipped", "Skipped"  # past a sample's time budget: not part of the sample

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="shards")
    index = models.PositiveIntegerField()
    first_record = models.BigIntegerField(help_text="Input position of the shard's first record (1-based).")
    record_count = models.PositiveIntegerField()
    first_line = models.BigIntegerField()
    start_byte = models.BigIntegerField()
    end_byte = models.BigIntegerField()

    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    gpu = models.ForeignKey(Gpu, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    failed_on = models.ForeignKey(
        Gpu, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The slot it last failed on."
    )
    claim = models.CharField(max_length=32, blank=True)
    worker_pid = models.PositiveIntegerField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    records_out = models.PositiveIntegerField(null=True, blank=True)
    records_rejected = models.PositiveIntegerField(null=True, blank=True)
    records_done = models.PositiveIntegerField(
        default=0, help_text="While it runs, the records of its claim done so far (batch by batch)."
    )
    peak_memory_mb = models.PositiveIntegerField(
        null=True, blank=True, help_text="The slot process's peak resident memory when the shard was done."
    )
    output_path = models.CharField(max_length=500, blank=True)
    rejects_path = models.CharField(max_length=500, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["job", "index"]
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="one_shard_per_index")]

    SETTLED = (Status.DONE, Status.FAILED, Status.SKIPPED)  # nothing more will be done to it in this pass

    def __str__(self) -> str:
        return f"shard {self.index} of job {self.job_id}"

    @property
    def last_error(self) -> str:
        """The last line of its last error (the exception), or why there is none."""
        return self.error.strip().splitlines()[-1] if self.error.strip() else "its worker stopped"


def hold_periods(holds: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """When the job held any GPU, from its GPUs' holds: the holds that overlap or touch (its GPUs share
    a start, a slot that rejoins overlaps the others) make one period. More than one when the job lost
    every GPU and was held again."""
    periods: list[tuple[datetime, datetime]] = []
    for start, end in sorted(holds):
        if periods and start <= periods[-1][1]:
            periods[-1] = (periods[-1][0], max(periods[-1][1], end))
        else:
            periods.append((start, end))
    return periods


class Allocation(TimeStamped):
    """One GPU held by one job: the meter runs from held_from to held_to."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="allocations")
    held_from = models.DateTimeField()
    held_to = models.DateTimeField(null=True, blank=True)
    runner = models.CharField(
        max_length=32, blank=True, help_text="The token of the slot task serving the hold; an older one stops."
    )
    runner_seen = models.DateTimeField(
        null=True, blank=True, help_text="When a slot task serving the hold was last sent or last reported."
    )
    give_back = models.BooleanField(
        default=False,
        help_text="Asked back by the scheduler (the hold ends at its next shard boundary), or given back.",
    )

    class Meta:
        ordering = ["job", "gpu"]
        constraints = [
            models.UniqueConstraint(fields=["gpu"], condition=Q(held_to__isnull=True), name="one_open_hold_per_gpu")
        ]

    def __str__(self) -> str:
        return f"{self.gpu} for job {self.job_id}"


class UsageHour(models.Model):
    """An organisation's seconds of slots held, summed by the hour (UTC) its holds ended in: what the fair share
    reads of the past (jobs.scheduling._usage), a row an hour however many holds ended in it. Written where a
    hold ends (add), in the same transaction, so a hold ended late (a silent node's, at its last sight) adds to
    the hour it ended in like any other."""

    organisation = models.ForeignKey(Organisation, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    seconds = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organisation", "hour"], name="one_usage_row_an_hour")]

    def __str__(self) -> str:
        return f"{self.organisation_id} at {self.hour:%Y-%m-%d %H:00}: {self.seconds:.0f} s held"

    @classmethod
    def held(cls, allocations) -> list[tuple[int, datetime, float]]:
        """The ended holds among `allocations` (a queryset), summed: (organisation, hour, seconds) rows."""
        length = models.ExpressionWrapper(F("held_to") - F("held_from"), output_field=models.DurationField())
        rows = allocations.filter(held_to__isnull=False).order_by()
        rows = rows.values_list("job__organisation_id", TruncHour("held_to", tzinfo=UTC)).annotate(s=Sum(length))
        return sorted((org, hour, max(0.0, held.total_seconds())) for org, hour, held in rows)

    @classmethod
    def add(cls, allocations) -> None:
        """Add the ended holds among `allocations` (a queryset) to their organisations' hours. Rows are
        touched in (organisation, hour) order, so that two writers lock them in the same order."""
        for org, hour, seconds in cls.held(allocations):
            row = cls.objects.filter(organisation_id=org, hour=hour)
            if row.update(seconds=F("seconds") + seconds):
                continue
            try:
                with transaction.atomic():
                    cls.objects.create(organisation_id=org, hour=hour, seconds=seconds)
            except IntegrityError:  # another writer made the hour's row since
                row.update(seconds=F("seconds") + seconds)


class Upload(TimeStamped):
    """A resumable upload (tus 1.0) in progress: its bytes so far lie in one file under E31_UPLOAD_DIR.

    `offset` counts the bytes confirmed; anything in the file past it is from a chunk that did not
    complete and is cut off by the next one. `crc32` is the CRC-32 of those confirmed bytes, so a client
    can check that its file still begins with them before it resumes. When a job is submitted with the
    finished upload, the file moves to storage and the row goes."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organisation = models.ForeignKey(Organisation, on_delete=models.CASCADE, related_name="uploads")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    filename = models.CharField(max_length=200)
    length = models.PositiveBigIntegerField()
    offset = models.PositiveBigIntegerField(default=0)
    crc32 = models.PositiveBigIntegerField(
        null=True,
        default=0,
        help_text="The CRC-32 of the bytes confirmed; none for an upload begun before it was kept.",
    )
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(offset__lte=F("length")), name="upload_offset_within_length")]

    def __str__(self) -> str:
        return f"{self.filename} ({self.offset} of {self.length} bytes)"

    @property
    def complete(self) -> bool:
        return self.offset == self.length

    @property
    def path(self) -> Path:
        return settings.E31_UPLOAD_DIR / self.id.hex

    @property
    def expired(self) -> bool:
        return self.expires_at <= timezone.now()


class SlotReading(models.Model):
    """A held GPU's utilisation and memory in use at one heartbeat: the history of a hold that the job's
    page draws as held against used. Written at most so often per hold (jobs.history), and pruned by age."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="readings")
    at = models.DateTimeField()
    utilisation = models.PositiveSmallIntegerField(help_text="Percent busy.")
    memory_used_mb = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["allocation", "at"], name="slot_reading_allocation_at")]

    def __str__(self) -> str:
        return f"{self.allocation} at {self.at:%Y-%m-%d %H:%M:%S}: {self.utilisation}%"


class NodeSample(models.Model):
    """A node's slots online, held and in use, once a minute: the operators' last day of the fleet."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField(help_text="The minute it was taken in.")
    slots = models.PositiveIntegerField(help_text="Slots online.")
    held = models.PositiveIntegerField(help_text="Slots held by a job.")
    used = models.FloatField(
        null=True, blank=True, help_text="The slots' utilisation added up, in slots; none when no slot reports it."
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "at"], name="one_sample_per_node_a_minute")]
        indexes = [models.Index(fields=["at"], name="node_sample_at")]

    def __str__(self) -> str:
        return f"{self.node} at {self.at:%Y-%m-%d %H:%M}"


class QueueSample(models.Model):
    """How many jobs waited in the queue (those on hold among them) and ran, once a minute."""

    at = models.DateTimeField(unique=True, help_text="The minute it was taken in.")
    queued = models.PositiveIntegerField()
    on_hold = models.PositiveIntegerField(help_text="Of the queued, those the operators hold.")
    running = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"the queue at {self.at:%Y-%m-%d %H:%M}"
