"""What the rest of the portal may do with jobs: submit, find, cancel and read their progress."""

import io
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Q, Sum
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone

from billing.models import RetentionPolicy
from jobs import enqueue, processors, uploads
from jobs.models import Job, Shard, State, Upload
from jobs.scheduling import parse_request, sizing
from jobs.staging import s3, sources
from portal import units
from portal.models import Organisation

SHA256 = re.compile(r"[0-9a-f]{64}")


class SubmitError(ValueError):
    """A job that cannot be accepted; `field` names the part of the form that is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def organisation_for(user) -> Organisation | None:
    membership = getattr(user, "membership", None) if user.is_authenticated else None
    return membership.organisation if membership else None


def jobs_for_user(user):
    organisation = organisation_for(user)
    return Job.objects.filter(organisation=organisation) if organisation else Job.objects.none()


def get_job_for_user(request, pk: int) -> Job:
    """The job if it belongs to the user's organisation; 404 otherwise, whoever asks."""
    if not request.user.is_authenticated:
        raise Http404
    return get_object_or_404(jobs_for_user(request.user).select_related("organisation"), pk=pk)


def submit_job(
    *,
    organisation: Organisation,
    user,
    work: str,
    params: dict,
    gpus,
    hours,
    data: BinaryIO | None = None,
    data_name: str = "",
    upload: Upload | None = None,
    location: str = "",
    s3_credentials: dict | None = None,
    shape: str = Job.Shape.SHORT_WIDE,
    deadline: datetime | None = None,
    retention_days: int = 0,
    output_keep_days: int | None = None,
    expected_sha256: str = "",
    allow_partial: bool = False,
    sample: bool = False,
    model: BinaryIO | None = None,
    model_name: str = "",
) -> Job:
    """Check a job's four parts, store its data and queue its staging. Nothing is held yet.

    The data is an uploaded file (`data`, `data_name`), a finished resumable `upload`, or a
    `location`: an HTTP(S) URL, an S3 URI (with `s3_credentials` for the partner's own bucket) or
    a path under one of the operator's staging roots. A work kind that takes a model file (onnx-infer)
    gets it as `model`, checked here.

    With `sample`, the job is a sample: it stages the data, runs the work on one slot for about
    E31_SAMPLE_SECONDS and measures it; the request given is kept as the one the pass would make,
    and the staged copy is kept at least E31_SAMPLE_KEEP_DAYS for that pass (submit_pass), within
    the retention policy's limit."""
    try:
        processor = processors.get(work)
        checked_params = processor.validate_params(params)
    except processors.ParamError as error:
        raise SubmitError("work", str(error)) from None
    expected_sha256 = expected_sha256.strip().lower()
    if expected_sha256 and not SHA256.fullmatch(expected_sha256):
        raise SubmitError("sha256", f"A SHA-256 is 64 hexadecimal digits, not {expected_sha256!r}.")
    policy = RetentionPolicy.in_force(organisation)
    output_keep_days = _check_retention(policy, retention_days, output_keep_days)
    if upload is not None:
        source = _describe_upload(processor, organisation, upload, data, location)
    else:
        source = _describe_source(processor, organisation, data, data_name, location.strip(), s3_credentials)
    try:
        gpus, hours = parse_request(gpus, hours, shape, work=processor.name)
    except ValueError as error:
        raise SubmitError(getattr(error, "field", "gpus"), str(error)) from None
    checked_model = _check_model(processor, model, model_name)
    deadline = _check_deadline(deadline)
    request = {"gpus": gpus, "hours": hours, "shape": shape, "deadline": deadline, "retention_days": retention_days}
    if sample:
        asked = {**request, "hours": str(hours), "output_keep_days": output_keep_days}
        asked["deadline"] = deadline and deadline.isoformat()
        request.update(gpus=1, hours=sizing.sample_hours(), shape=Job.Shape.SHORT_WIDE, deadline=None)
        request["retention_days"] = max(retention_days, policy.sample_keep_days)
        source["sample_result"] = {"request": asked}
    if data is not None:
        source["source_path"] = uploads.store_upload(data, data_name)
    if upload is not None:
        source["source_path"] = _take_upload(upload)
    if checked_model:
        source.update(model_path=uploads.store_model(model, model_name), model_name=uploads.safe_name(model_name))
    return _create(
        organisation=organisation,
        created_by=user if user and user.is_authenticated else None,
        kind=Job.Kind.SAMPLE if sample else Job.Kind.PASS,
        work=processor.name,
        params=checked_params,
        expected_sha256=expected_sha256,
        allow_partial=allow_partial,
        output_keep_days=output_keep_days,
        **request,
        **source,
    )


def _check_model(processor, model: BinaryIO | None, name: str) -> bool:
    """Whether the job comes with a model file its work takes; SubmitError when it needs one it lacks,
    has one it cannot use, or the file is too large or does not load."""
    if not processor.model_file:
        if model is not None:
            raise SubmitError("model", f"{processor.name} takes no model file.")
        return False
    if model is None:
        raise SubmitError("model", f"{processor.name} needs {processor.model_file} with the job.")
    size = model.seek(0, io.SEEK_END)
    model.seek(0)
    if size > settings.E31_MAX_MODEL_BYTES:
        limit = units.size(settings.E31_MAX_MODEL_BYTES)
        raise SubmitError("model", f"The model file {name} is {units.size(size)}; the limit is {limit}.")
    try:
        with uploads.local_copy(model) as path:
            processor.check_model(path)
    except processors.ParamError as error:
        raise SubmitError("model", f"{name}: {error}.") from None
    return True


def _check_deadline(deadline: datetime | None) -> datetime | None:
    """A deadline in the future, or none; one without a time zone is read as UTC."""
    if deadline is None:
        return None
    deadline = timezone.make_aware(deadline, UTC) if timezone.is_naive(deadline) else deadline.astimezone(UTC)
    if deadline <= timezone.now():
        raise SubmitError("deadline", f"The deadline, {deadline:%Y-%m-%d %H:%M} UTC, has passed; give a later one.")
    return deadline


def _check_retention(policy: RetentionPolicy, days: int, output_days: int | None) -> int:
    """The days the staged copy and the output are kept, as asked, within the retention policy in
    force; the output's (the policy's default when not asked) returned."""
    if not 0 <= days <= policy.max_staged_days:
        raise SubmitError("keep_days", f"Keep the staged copy 0 to {policy.max_staged_days} days, not {days}.")
    output_days = policy.output_days if output_days is None else output_days
    if not 1 <= output_days <= policy.max_output_days:
        raise SubmitError("output_days", f"Keep the output 1 to {policy.max_output_days} days, not {output_days}.")
    return output_days


def _create(**fields) -> Job:
    with transaction.atomic():
        job = Job.objects.create(**fields)
        what = "a sample of " if job.kind == Job.Kind.SAMPLE else ""
        job.events.create(state=State.SUBMITTED, at=job.created, message=f"submitted {what}{job.source_name}")
        enqueue.stage(job.pk)
    return job


def submit_pass(
    sample: Job, *, user, gpus, hours, shape: str = Job.Shape.SHORT_WIDE, deadline: datetime | None = None,
    retention_days: int = 0, output_keep_days: int | None = None, allow_partial: bool = False,
) -> Job:  # fmt: skip
    """The full pass a sample was run for: the same work on all of the data, whose staged copy it
    takes over from the sample (the data is not staged again), cut into shards sized by the sample."""
    if sample.kind != Job.Kind.SAMPLE or sample.state != State.SUCCEEDED:
        raise SubmitError("sample", f"Job {sample.pk} is not a finished sample.")
    if not sample.staged_path or sample.staged_purged_at:
        gone = f"The staged copy of sample {sample.pk} is gone (purged, or used by a pass); submit the data again."
        raise SubmitError("sample", gone)
    output_keep_days = _check_retention(RetentionPolicy.in_force(sample.organisation), retention_days, output_keep_days)
    try:
        gpus, hours = parse_request(gpus, hours, shape, work=sample.work)
    except ValueError as error:
        raise SubmitError(getattr(error, "field", "gpus"), str(error)) from None
    return _create(
        organisation=sample.organisation,
        created_by=user if user and user.is_authenticated else None,
        sample=sample,
        work=sample.work,
        params=sample.params,
        source_kind=sample.source_kind,
        source_name=sample.source_name,
        source_uri=sample.source_uri,
        input_format=sample.input_format,
        model_path=sample.model_path,
        model_name=sample.model_name,
        gpus=gpus,
        hours=hours,
        shape=shape,
        deadline=_check_deadline(deadline),
        retention_days=retention_days,
        output_keep_days=output_keep_days,
        allow_partial=allow_partial,
    )


def _describe_upload(processor, organisation, upload: Upload, data, location: str) -> dict:
    """A finished resumable upload's data fields, once it is found fit for the work."""
    if data is not None or location.strip():
        raise SubmitError("data", "Give the data one way: upload a file, or give a URL or a server path.")
    if upload.organisation_id != organisation.pk:
        raise SubmitError("data", "There is no such upload.")
    if not upload.complete or upload.expired:
        state = "expired" if upload.expired else f"at {upload.offset:,} of {upload.length:,} bytes"
        raise SubmitError("data", f"The upload of {upload.filename} is {state}: finish it, then submit.")
    with upload.path.open("rb") as head:
        return _describe_source(processor, organisation, head, upload.filename, "")


def _take_upload(upload: Upload) -> str:
    """Move a finished upload's file to storage; only one job takes it, even from a form sent twice."""
    if not Upload.objects.filter(pk=upload.pk).delete()[0]:
        raise SubmitError("data", f"The upload of {upload.filename} was already used for a job.")
    return uploads.store_file(upload.path, upload.filename)


def _describe_source(
    processor, organisation, data: BinaryIO | None, data_name: str, location: str, s3_credentials: dict | None = None
) -> dict:
    """The job's data fields, once the data is found fit for the work; SubmitError says why not.

    An upload or a server path is read far enough to know its format now; a URL or an S3 URI is
    only checked (its form, and who may read it) and read when it is staged."""
    if (data is None) == (not location):
        raise SubmitError("data", "Give the data one way: upload a file, or give a URL or a server path.")
    if data is not None:
        kind, name, fields, head = Job.Source.UPLOAD, data_name, {}, data
    else:
        try:
            sources.check(location, organisation.slug, s3_credentials)
        except sources.SourceError as error:
            raise SubmitError("data", str(error)) from None
        kind, name = sources.kind_of(location), sources.name_of(location)
        fields = {"source_uri": location}
        if s3_credentials:
            fields["source_secret"] = s3.seal(s3_credentials)
        head = sources.server_path(location, organisation.slug).open("rb") if kind == Job.Source.PATH else None
    fields.update(source_kind=kind, source_name=uploads.safe_name(name))
    if head is None:
        return fields
    try:
        layout = uploads.inspect(head, name)
    except uploads.FormatError as error:
        raise SubmitError("data", str(error)) from None
    finally:
        if head is not data:
            head.close()
    if layout["format"] not in processor.input_formats:
        formats = ", ".join(processor.input_formats)
        raise SubmitError("data", f"{processor.name} reads {formats}, not {layout['format']}.")
    return {**fields, "input_format": layout["format"]}


@dataclass(frozen=True)
class Progress:
    records_total: int
    records_done: int
    shards_total: int
    shards_done: int
    records_per_second: float | None
    eta_seconds: float | None

    @property
    def percent(self) -> int:
        if not self.records_total:
            return 0
        return min(100, int(100 * self.records_done / self.records_total))


def progress(job: Job) -> Progress:
    done = Q(status__in=(Shard.Status.DONE, Shard.Status.FAILED))  # a failed shard of a partial output too
    counted = ~Q(status=Shard.Status.SKIPPED)  # a sample's shards left when its time was up are not its work
    totals = job.shards.aggregate(
        shards=Count("pk", filter=counted),
        shards_done=Count("pk", filter=done),
        records_done=Sum("record_count", filter=done),
        records=Sum("record_count", filter=counted),
    )
    records_done = totals["records_done"] or 0
    total = (job.records_total if job.kind == Job.Kind.PASS else totals["records"]) or 0
    rate = eta = None
    if job.started_at and records_done:
        released = job.allocations.aggregate(Max("held_to"))["held_to__max"] if job.state != State.RUNNING else None
        # Held time only: a job held again after losing its nodes counts its earlier hold, not the queue between.
        elapsed = ((released or timezone.now()) - job.started_at + job.held_before).total_seconds()
        if elapsed > 0:
            rate = records_done / elapsed
            if job.state == State.RUNNING:
                eta = (total - records_done) / rate
    return Progress(total, records_done, totals["shards"], totals["shards_done"], rate, eta)
