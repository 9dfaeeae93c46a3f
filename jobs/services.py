"""What the rest of the portal may do with jobs: submit them (or check them, a dry run) and find them. Every refusal
of a job is a sentence here, and all of a request's are said at once, whichever way in it came by. What a job's
page reads is in facts.py."""

import contextlib
import hashlib
import io
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone

from jobs import enqueue, processors, scheduling, uploads
from jobs.billing_port import RetentionLimits, billing
from jobs.models import ACTIVE, Job, State, Upload
from jobs.scheduling import RequestError, parse_request, parse_width, policy, sizing
from jobs.spec import Data, JobSpec, NamedFile, Request, Retention, Work
from jobs.staging import s3, sources
from portal import units
from portal.models import Organisation, organisation_for
from portal.text import ascii_count, shown

SHA256 = re.compile(r"[0-9a-f]{64}")
LOCATION_CHARS = Job._meta.get_field("source_uri").max_length
# What a location is, as a refusal of parts of different kinds names it.
_KINDS = {Job.Source.URL: "a URL", Job.Source.S3: "an S3 URI", Job.Source.PATH: "a server path"}
T = TypeVar("T")


@dataclass(frozen=True)
class Refusal:
    """One thing wrong with a job: the part of it refused (`field`, as named here) and the sentence that says why."""

    field: str
    message: str


class SubmitError(ValueError):
    """A job that cannot be accepted: every refusal found, each naming the part of the form that is wrong
    (`params.<name>` for a work parameter). `field` and the message are the first's."""

    def __init__(self, field: str, message: str, *more: Refusal):
        super().__init__(message)
        self.field = field
        self.refusals = (Refusal(field, message), *more)

    @classmethod
    def of(cls, refusals: Sequence[Refusal]) -> "SubmitError":
        first, *more = refusals
        return cls(first.field, first.message, *more)


class _Checks:
    """A job's checks, run one after another with each refusal kept, so that all of them are said at once."""

    def __init__(self) -> None:
        self.refusals: list[Refusal] = []

    def run(self, check: Callable[..., T], *args) -> T | None:
        """What `check` returns, or None when it refuses (its refusals kept for `done`)."""
        try:
            return check(*args)
        except SubmitError as error:
            self.refusals.extend(error.refusals)
            return None

    def done(self) -> None:
        """SubmitError with every refusal kept, if there is any."""
        if self.refusals:
            raise SubmitError.of(self.refusals)


def jobs_for_user(user):
    organisation = organisation_for(user)
    return Job.objects.filter(organisation=organisation) if organisation else Job.objects.none()


class Missing(Http404):
    """A 404 whose sentence may be shown to the partner as it is (the API's answer names the job)."""


def get_job_for_user(request, pk: int, jobs: QuerySet | None = None) -> Job:
    """The job if it belongs to the user's organisation; 404 otherwise, whoever asks. From `jobs` when
    given: the jobs with what the caller reads of them in the same query."""
    if not request.user.is_authenticated:
        raise Http404
    # One query: the job, joined to the user's membership of its organisation.
    jobs = (Job.objects.all() if jobs is None else jobs).filter(organisation__memberships__user=request.user)
    job = jobs.select_related("organisation").filter(pk=pk).first()
    if job is None:
        raise Missing(f"There is no job {pk} in your organisation.")
    return job


def submit_job(organisation: Organisation, user, spec: JobSpec) -> Job:
    """Check a job's four parts, store its data and queue its staging. Nothing is held yet.

    A work kind that takes a model (onnx-infer, embed, classify, generate) gets it with the work, checked
    here: a file, one fetched now from a URL or a server path, or an earlier job's that is still kept.

    With `spec.sample`, the job is a sample: it stages the data, runs the work on one slot for about
    E31_SAMPLE_SECONDS and measures it; the request given is kept as the one the pass would make,
    and the staged copy is kept at least E31_SAMPLE_KEEP_DAYS for that pass (submit_pass), within
    the retention policy's limit."""
    with contextlib.ExitStack() as files:
        checked = _checked(organisation, spec, files)
        return _create(created_by=user if user and user.is_authenticated else None, **_stored(checked))


def check_job(organisation: Organisation, spec: JobSpec) -> Job:
    """A dry run of submit_job: every check it makes, and the job it would make, unsaved. Nothing is stored,
    no upload is used and no staging is queued; a refusal is submit_job's SubmitError."""
    with contextlib.ExitStack() as files:
        return Job(**_checked(organisation, spec, files).fields)


@dataclass
class _Checked:
    """A job that passed its checks: its fields, and what submit_job stores with it (the data sent with the
    job or the finished upload that holds it, and a model file no earlier job keeps)."""

    fields: dict
    file: NamedFile | None = None
    upload: Upload | None = None
    model: NamedFile | None = None


def _checked(organisation: Organisation, spec: JobSpec, files: contextlib.ExitStack) -> _Checked:
    """submit_job's checks: those of the work, the data, the request and the retention all made, so that every
    refusal among them is said at once; then the model's, which fetch and load it, once the rest is right. A
    model fetched from a location is a file on `files`."""
    work, data, retention = spec.work, spec.data, spec.retention
    checks = _Checks()
    processor = checks.run(_processor, work.kind)
    params = checks.run(_check_params, processor, work.params) if processor else None
    if processor:
        checks.run(_check_model_given, processor, work)
    credentials = checks.run(_credentials_for, data, work)
    expected_sha256 = checks.run(_check_sha256, data.sha256)
    upload, source = checks.run(_data_of, processor, organisation, data, credentials) or (None, None)
    asked = checks.run(_check_request, spec.request, processor.name if processor else "")
    deadline = checks.run(_check_deadline, spec.request.deadline)
    policy = billing().retention_limits(organisation)
    kept_for = checks.run(_check_retention, policy, retention)
    checks.done()
    model, kept, model_source = _model_of(processor, organisation, work, credentials["model"], files)
    model_sha256 = _check_model(processor, model)
    staged_days, output_keep_days = kept_for
    request = {**asked, "shape": spec.request.shape, "deadline": deadline}
    request["retention_days"] = staged_days
    if spec.sample:
        pass_asked = {**request, "hours": str(asked["hours"]), "output_keep_days": output_keep_days}
        pass_asked["deadline"] = deadline and deadline.isoformat()
        request.update(gpus=1, hours=sizing.sample_hours(), shape=Job.Shape.SHORT_WIDE, deadline=None)
        request.update(request=Job.Request.FIXED, max_gpus=None)
        request["retention_days"] = max(staged_days, policy.sample_keep_days)
        source["sample_result"] = {"request": pass_asked}
    _check_spend(organisation, request)
    if model_sha256:
        source.update(model_source=model_source, model_sha256=model_sha256)
    if model_sha256 and kept is not None:
        source.update(model_path=kept.model_path, model_name=kept.model_name)
    elif model_sha256:
        source["model_name"] = uploads.safe_name(model.name)
    fields = dict(
        organisation=organisation,
        kind=Job.Kind.SAMPLE if spec.sample else Job.Kind.PASS,
        work=processor.name,
        params=params,
        expected_sha256=expected_sha256,
        allow_partial=spec.request.allow_partial,
        output_keep_days=output_keep_days,
        **request,
        **source,
    )
    fields.update(_outlook(fields))
    return _Checked(fields, data.file, upload, model if model_sha256 and kept is None else None)


def _stored(checked: _Checked) -> dict:
    """The job's fields with its data and its model stored where staging reads them: the upload is used up."""
    fields = dict(checked.fields)
    if checked.file is not None:
        fields["source_path"] = uploads.store_upload(checked.file.stream, checked.file.name)
    if checked.upload is not None:
        fields["source_path"] = _take_upload(checked.upload)
    if checked.model is not None:
        fields["model_path"] = uploads.store_model(checked.model.stream, checked.model.name)
    return fields


def _processor(kind: str) -> processors.Processor:
    try:
        return processors.get(kind)
    except processors.ParamError as error:
        raise SubmitError("work", str(error)) from None


def _check_params(processor: processors.Processor, given: Mapping[str, Any]) -> dict:
    """The work's parameters read, each refused on its own field (`params.<name>`); then read together, where a
    work may refuse a combination, on the field of the parameter its sentence begins with."""
    checks = _Checks()
    for name, value in given.items():
        checks.run(_check_param, processor, name, value)
    checks.done()
    try:
        return processor.validate_params(given)
    except processors.ParamError as error:
        named = [name for name in given if str(error).startswith(f"{name} ")]
        raise SubmitError(f"params.{named[0]}" if named else "work", str(error)) from None


def _check_param(processor: processors.Processor, name: str, value: Any) -> None:
    try:
        processor.parse_param(name, value)
    except processors.ParamError as error:
        raise SubmitError(f"params.{name}", str(error)) from None


def _check_sha256(given: str) -> str:
    expected = given.strip().lower()
    if expected and not SHA256.fullmatch(expected):
        raise SubmitError("sha256", f"A SHA-256 is 64 hexadecimal digits, not {expected!r}.")
    return expected


def _data_of(processor, organisation: Organisation, data: Data, credentials: dict | None) -> tuple:
    """The finished upload the data is (None for any other), and the job's data fields, once it is found fit
    for the work (when the work is known). Not checked when its credentials were refused."""
    if credentials is None:
        return None, None
    upload = _find_upload(organisation, data) if data.upload is not None else None
    if upload is not None:
        return upload, _describe_upload(processor, organisation, upload)
    return None, _describe_source(processor, organisation, data.file, _locations(data), credentials["data"])


def _first_location(data: Data) -> str:
    """The data's location, or the first of its parts'."""
    return (data.locations[:1] or (data.location,))[0].strip()


def _locations(data: Data) -> tuple[str, ...]:
    """The data's locations as given, blank lines left out: one, several (a dataset of parts), or none."""
    if data.location.strip() and data.locations:
        raise SubmitError("data", "Give the data one way: upload a file, or give a URL or a server path.")
    given = tuple(location.strip() for location in (data.location, *data.locations) if location.strip())
    for number, location in enumerate(given, start=1):
        if len(location) > LOCATION_CHARS:
            what = f"Part {number}'s location" if len(given) > 1 else "The location"
            raise SubmitError("data", f"{what} is {len(location):,} characters; the most is {LOCATION_CHARS:,}.")
    return given


def kept_models(organisation: Organisation):
    """The organisation's jobs whose model is still kept, newest first: retention keeps a job's model
    while the job is under way or keeps its staged copy, and a model can be chosen again until then."""
    still_kept = Q(state__in=ACTIVE) | (Q(staged_purged_at__isnull=True) & ~Q(staged_path=""))
    return Job.objects.filter(organisation=organisation).exclude(model_path="").filter(still_kept).order_by("-pk")


def _credentials_for(data: Data, work: Work) -> dict:
    """The S3 credentials to read the data and the model with, whichever is on S3: the data's own, and
    the model's own when given, else the data's (one set may read both). Refused when what they would
    read is not on S3."""
    data_on_s3, model_on_s3 = (
        bool(location) and sources.kind_of(location) == Job.Source.S3
        for location in (_first_location(data), work.model_location.strip())
    )
    own = work.model_s3_credentials or None
    if own and not model_on_s3:
        raise SubmitError("model_s3_credentials", "The model's S3 credentials go with an s3:// model location only.")
    if data.s3_credentials and not (data_on_s3 or (model_on_s3 and not own)):
        raise SubmitError("data", "S3 credentials go with an s3:// location only.")
    return {
        "data": (data.s3_credentials or None) if data_on_s3 else None,
        "model": (own or data.s3_credentials or None) if model_on_s3 else None,
    }


def _check_model_given(processor: processors.Processor, work: Work) -> None:
    """That the work is given a model one way if it takes one, and none if it does not: said before anything
    is fetched."""
    ways = [way for way in (work.model, work.model_location.strip(), work.model_from_job) if way]
    if ways and not processor.model_file:
        raise SubmitError("model", f"{processor.name} takes no model file.")
    if len(ways) > 1:
        raise SubmitError(
            "model", "Give the model one way: a file, a URL, an S3 URI or server path, or an earlier job's."
        )
    if not ways and processor.model_file:
        raise SubmitError("model", f"{processor.name} needs {processor.model_file} with the job.")


def _model_of(processor, organisation: Organisation, work, s3_credentials: dict | None, files) -> tuple:
    """The model the work is given (one way, _check_model_given), as a file to check, opened on `files`; with
    the earlier job it is kept for, when it is one chosen again, and where it came from. SubmitError when it
    cannot be had."""
    if location := work.model_location.strip():
        copy = files.enter_context(tempfile.TemporaryFile(dir=settings.FILE_UPLOAD_TEMP_DIR))  # noqa: SIM115 (`files`)
        try:
            name = sources.copy_model(location, organisation.slug, copy, s3_credentials)
        except sources.SourceError as error:
            raise SubmitError("model", str(error)) from None
        return NamedFile(copy, name), None, sources.recorded(location)
    if work.model_from_job:
        kept = kept_models(organisation).filter(pk=work.model_from_job).first()
        if kept is None or not default_storage.exists(kept.model_path):
            raise SubmitError("model", _not_kept(organisation, work.model_from_job))
        model = NamedFile(files.enter_context(default_storage.open(kept.model_path, "rb")), kept.model_name)
        return model, kept, kept.model_source if kept.model_source not in ("", "upload") else f"job {kept.pk}"
    return work.model, None, "upload" if work.model else ""


def _not_kept(organisation: Organisation, pk: int) -> str:
    """Why the organisation cannot choose job `pk`'s model again: there is no such job of theirs, it brought
    none, or it is no longer kept, and what to do then."""
    job = Job.objects.filter(organisation=organisation, pk=pk).first()
    if job is None:
        return f"There is no job {pk} in your organisation to take a model from."
    if not job.model_path:
        return f"Job {pk} brought no model."
    return (
        f"Job {pk}'s model is no longer kept: a model is kept while its job's staged copy is, and job {pk}'s "
        "was deleted. Send the model again; to choose a model again later, keep the staged copy of the job "
        "that brings it (its retention)."
    )


def _check_model(processor, model: NamedFile | None) -> str:
    """The SHA-256 of the model file the job comes with, once it loads; "" when it comes with none.
    SubmitError when the file is too large or does not load."""
    if model is None:
        return ""
    size = model.stream.seek(0, io.SEEK_END)
    model.stream.seek(0)
    if size > settings.E31_MAX_MODEL_BYTES:
        limit = units.limit(settings.E31_MAX_MODEL_BYTES)
        raise SubmitError("model", f"The model file {model.name} is {units.size(size)}; the limit is {limit}.")
    try:
        with uploads.local_copy(model.stream) as path:
            facts = processor.check_model(path)
            if facts.get("sha256"):
                return facts["sha256"]
            with open(path, "rb") as handle:
                return hashlib.file_digest(handle, "sha256").hexdigest()
    except processors.ParamError as error:
        raise SubmitError("model", f"{model.name}: {error}.") from None


def _check_request(request: Request, work: str) -> dict:
    """The GPUs and hours asked for, read and within the request limits for the work; the kind of request
    and its width cap: the job's request fields, every refusal among them said at once."""
    refusals: list[tuple[str, str]] = []
    gpus = hours = kind = cap = None
    try:
        gpus, hours = parse_request(request.gpus, request.hours, request.shape, work=work)
    except RequestError as error:
        refusals.extend(error.refusals)
    try:
        has_deadline = bool(request.deadline and str(request.deadline).strip())
        kind, cap = parse_width(request.kind, request.max_gpus, has_deadline, work=work)
    except RequestError as error:
        refusals.extend(error.refusals)
    if refusals:
        raise SubmitError.of([Refusal(field, message) for field, message in refusals])
    return {"gpus": gpus, "hours": hours, "request": kind, "max_gpus": cap}


def _outlook(fields: dict) -> dict:
    """When the job is expected to start and end by the queue now, and whether that is by its deadline."""
    job, now = Job(**fields), timezone.now()
    start, finish = scheduling.outlook(job, now)
    feasible = None
    if job.deadline is not None:
        feasible = policy.can_promise(finish, job.deadline, now)
    return {"expected_start": start, "expected_finish": finish, "deadline_feasible": feasible}


def _check_spend(organisation: Organisation, fields: dict) -> None:
    """That the job's budget (its GPUs × hours at the rate in force) keeps its organisation within its
    monthly spend cap, counting this calendar month's charges and the budgets of its jobs not yet ended."""
    cap = organisation.monthly_spend_cap
    rate = billing().rate_in_force()
    if cap is None or rate is None:
        return
    budget = rate.price(fields["gpus"] * fields["hours"])
    committed = billing().month_committed(organisation)
    if committed + budget > cap:
        amounts = (budget, committed + budget, cap, committed)
        budget_, total, cap_, so_far = (units.money(amount, rate.currency) for amount in amounts)
        raise SubmitError(
            "hours",
            f"This job's budget, {budget_}, would take {organisation.name}'s spend this month to {total}, past its "
            f"cap of {cap_} ({so_far} charged or committed so far); ask for less, or ask an operator.",
        )


def _check_deadline(deadline: datetime | str | None) -> datetime | None:
    """A deadline in the future, or none (None or blank); text is read as ISO 8601, and a time without a
    time zone as UTC."""
    given = deadline
    if given is None or (isinstance(given, str) and not given.strip()):
        return None
    try:
        if not isinstance(deadline, datetime):
            deadline = datetime.fromisoformat(str(given).strip())
        deadline = timezone.make_aware(deadline, UTC) if timezone.is_naive(deadline) else deadline.astimezone(UTC)
    except (ValueError, OverflowError):  # not ISO 8601, or past the last year a date can hold once in UTC
        example = "2026-12-01T18:00 (UTC unless it says otherwise)"
        raise SubmitError("deadline", f"A deadline is a date and time such as {example}, not {shown(given)}.") from None
    if deadline <= timezone.now():
        raise SubmitError("deadline", f"The deadline, {deadline:%Y-%m-%d %H:%M} UTC, has passed; give a later one.")
    return deadline


def _check_retention(policy: RetentionLimits, retention: Retention) -> tuple[int, int]:
    """The days the staged copy and the output are kept, as asked (the output's the policy's default when not
    asked), within the retention policy in force: each refused on its own."""
    checks = _Checks()
    staged = checks.run(_days, "keep_days", retention.staged_days, 0, policy.max_staged_days, "the staged copy")
    output_days = policy.output_days if retention.output_days is None else retention.output_days
    output = checks.run(_days, "output_days", output_days, 1, policy.max_output_days, "the output")
    checks.done()
    return staged, output


def _days(field: str, given: int | str, least: int, most: int, what: str) -> int:
    """A whole number of days from `least` to `most`, given as a number or as typed."""
    days = ascii_count(given.strip(), signed=True) if isinstance(given, str) else given
    whole = isinstance(days, int) and not isinstance(days, bool)
    if not whole or not least <= days <= most:
        raise SubmitError(field, f"Keep {what} {least} to {most} days, not {days if whole else shown(given)}.")
    return days


def _create(**fields) -> Job:
    with transaction.atomic():
        job = Job.objects.create(**fields)
        what = "a sample of " if job.kind == Job.Kind.SAMPLE else ""
        job.events.create(state=State.SUBMITTED, at=job.created, message=f"submitted {what}{job.source_name}")
        enqueue.stage(job.pk)
    return job


def no_pass_needed(sample: Job) -> str:
    """What a sample that ran over every record says of its pass, wherever it is asked for."""
    return f"Sample {sample.pk} ran over every record: its output is the whole result; no pass is needed."


def submit_pass(sample: Job, user, request: Request, retention: Retention) -> Job:
    """The full pass a sample was run for: the same work on all of the data, whose staged copy it
    takes over from the sample (the data is not staged again), cut into shards sized by the sample."""
    if sample.kind != Job.Kind.SAMPLE or sample.state != State.SUCCEEDED:
        raise SubmitError("sample", f"Job {sample.pk} is not a finished sample.")
    if not sample.staged_path or sample.staged_purged_at:
        gone = f"The staged copy of sample {sample.pk} is gone (purged, or used by a pass); submit the data again."
        raise SubmitError("sample", gone)
    if sample.sample_was_whole:  # the same work again, billed again, for the same output
        raise SubmitError("sample", no_pass_needed(sample))
    checks = _Checks()
    asked = checks.run(_check_request, request, sample.work)
    deadline = checks.run(_check_deadline, request.deadline)
    kept_for = checks.run(_check_retention, billing().retention_limits(sample.organisation), retention)
    checks.done()
    staged_days, output_keep_days = kept_for
    _check_spend(sample.organisation, asked)
    fields = dict(
        organisation=sample.organisation,
        created_by=user if user and user.is_authenticated else None,
        sample=sample,
        work=sample.work,
        params=sample.params,
        source_kind=sample.source_kind,
        source_name=sample.source_name,
        source_uri=sample.source_uri,
        source_parts=sample.source_parts,
        input_format=sample.input_format,
        model_path=sample.model_path,
        model_name=sample.model_name,
        model_source=sample.model_source,
        model_sha256=sample.model_sha256,
        **asked,
        shape=request.shape,
        deadline=deadline,
        retention_days=staged_days,
        output_keep_days=output_keep_days,
        allow_partial=request.allow_partial,
    )
    return _create(**fields, **_outlook(fields))


def _find_upload(organisation: Organisation, data: Data) -> Upload:
    """The resumable upload the data names, if it is the organisation's, finished, and given alone."""
    upload = finished_upload(organisation, data.upload)
    if data.file is not None or _first_location(data):
        raise SubmitError("data", "Give the data one way: upload a file, or give a URL or a server path.")
    return upload


def finished_upload(organisation: Organisation, upload_id, field: str = "data") -> Upload:
    """A resumable upload of the organisation's that is finished and not expired (the API sends a model file
    this way too); SubmitError on `field` says why not."""
    upload = Upload.objects.filter(organisation=organisation, pk=upload_id).first()
    if upload is None:
        raise SubmitError(field, "That upload is gone: it expired or was used. Upload the file again.")
    if not upload.complete or upload.expired:
        state = "expired" if upload.expired else f"at {upload.offset:,} of {upload.length:,} bytes"
        raise SubmitError(field, f"The upload of {upload.filename} is {state}: finish it, then submit.")
    return upload


def _describe_upload(processor, organisation: Organisation, upload: Upload) -> dict:
    """A finished resumable upload's data fields, once it is found fit for the work."""
    with upload.path.open("rb") as head:
        return _describe_source(processor, organisation, NamedFile(head, upload.filename), ())


def _take_upload(upload: Upload) -> str:
    """Move a finished upload's file to storage; only one job takes it, even from a form sent twice."""
    if not Upload.objects.filter(pk=upload.pk).delete()[0]:
        raise SubmitError("data", f"The upload of {upload.filename} was already used for a job.")
    return uploads.store_file(upload.path, upload.filename)


def _describe_source(
    processor, organisation, file: NamedFile | None, locations: tuple[str, ...], s3_credentials: dict | None = None
) -> dict:
    """The job's data fields, once the data is found fit for the work (when `processor`, the work, is known);
    SubmitError says why not.

    An upload or a server path is read far enough to know its format now; a URL or an S3 URI is
    only checked (its form, and who may read it) and read when it is staged. Several locations are a
    dataset of parts (_describe_parts)."""
    if (file is None) == (not locations):
        raise SubmitError("data", "Give the data one way: upload a file, or give a URL or a server path.")
    locations = _in_folder(locations, organisation.slug)
    if len(locations) > 1:
        return _describe_parts(organisation, locations, s3_credentials)
    location = locations[0] if locations else ""
    if file is not None:
        kind, name, fields, head = Job.Source.UPLOAD, file.name, {}, file.stream
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
        if file is None:  # a server path, opened here
            head.close()
    if processor is not None and layout["format"] not in processor.input_formats:
        formats = ", ".join(processor.input_formats)
        raise SubmitError("data", f"{processor.name} reads {formats}, not {layout['format']}.")
    return {**fields, "input_format": layout["format"]}


def _in_folder(locations: tuple[str, ...], slug: str) -> tuple[str, ...]:
    """A server folder given alone is a dataset of its files, in name order (as an S3 prefix is of its
    objects); any other locations are as given."""
    if len(locations) != 1 or sources.kind_of(locations[0]) != Job.Source.PATH:
        return locations
    files = sources.server_folder(locations[0], slug)
    if files == []:
        raise SubmitError("data", f"{locations[0]} holds no files to stage.")
    return tuple(files) if files else locations


def _describe_parts(organisation: Organisation, locations: tuple[str, ...], s3_credentials: dict | None) -> dict:
    """The data fields of a dataset given as several locations: at most E31_MAX_DATASET_PARTS, none given twice,
    all of one kind, each checked as one location is (an S3 prefix, a dataset of its own, is no part). Their
    formats are read when they are staged, before anything is queued. A part refused is named by its place."""
    most = settings.E31_MAX_DATASET_PARTS
    if len(locations) > most:
        raise SubmitError("data", f"A dataset is at most {most:,} parts; {len(locations):,} were given.")
    kind, seen = sources.kind_of(locations[0]), {}
    for number, location in enumerate(locations, start=1):
        named = f"Part {number} ({sources.recorded(location)})"
        # A URL is the same part whatever its query says: another signature of one object.
        if (earlier := seen.setdefault(sources.recorded(location).removesuffix("?…"), number)) != number:
            raise SubmitError("data", f"{named} is part {earlier} again: give each part once.")
        if sources.kind_of(location) != kind:
            raise SubmitError(
                "data",
                f"{named} is {_KINDS[sources.kind_of(location)]} and part 1 is {_KINDS[kind]}: the parts of one "
                "dataset are all URLs, all S3 objects or all server paths.",
            )
        try:
            sources.check(location, organisation.slug, s3_credentials)
        except sources.SourceError as error:
            raise SubmitError("data", f"{named}: {error}") from None
        if kind == Job.Source.S3 and s3.parse(location).is_prefix:
            raise SubmitError("data", f"{named} is an S3 prefix, a dataset of its own: give it alone, or its objects.")
    fields = {"source_uri": locations[0], "source_parts": [{"location": location} for location in locations]}
    if s3_credentials:
        fields["source_secret"] = s3.seal(s3_credentials)
    return {**fields, "source_kind": kind, "source_name": uploads.safe_name(sources.name_of(locations[0]))}
