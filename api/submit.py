"""Making jobs through the API (docs/api.md, "Jobs"): a job, and the full pass of a finished sample with the
sample's estimate beside it. The JSON becomes a jobs.spec.JobSpec and goes to jobs.services, the job form's
and `submit`'s path: the checks and their sentences are the service's, and a refusal names its value as
docs/api.md does (`request.gpus`), every one of them at once. What is read here is only the JSON's shape: a
number given as text or a value of the wrong kind is passed on as given, for the service to say what is wrong
with it. A dry run (`?dry_run=1`) makes every check and nothing else: it answers the job that would be made."""

from collections.abc import Mapping
from contextlib import ExitStack

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.decorators import api_view, throttle_classes
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from api.errors import Conflict, invalid
from api.idempotency import KEY_PARAMETER, idempotent
from api.pagination import query
from api.representation import checked_json, job_json
from api.schema import OBJECT, answers
from api.throttling import SubmitRate, TokenRate
from api.webhooks import endpoints
from jobs import enqueue, scheduling, services
from jobs.facts import JobFacts
from jobs.models import Job, Upload
from jobs.spec import Data, JobSpec, NamedFile, Request, Retention, Work
from jobs.uploads import resumable
from portal.models import organisation_for
from portal.text import ascii_count, clean_name, shown

NO_SAMPLE = "This job is not a finished sample, so it sized no pass."


class Strict(serializers.Serializer):
    """An object of the body that refuses a key it does not know, naming it: a misspelt key is not silently a
    default."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping) and (unknown := sorted(set(data) - set(self.fields))):
            known = ", ".join(self.fields)
            raise ValidationError({unknown[0]: [f"There is no {shown(unknown[0])} here; the keys are: {known}."]})
        return super().to_internal_value(data)


@extend_schema_field({"oneOf": [{"type": "number"}, {"type": "string"}]})
class AsGiven(serializers.Field):
    """A number, as JSON or as text, passed on as given: the service reads it and says what is wrong."""

    default_error_messages = {"invalid": "Give a number, or a number as text."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float | str):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]})
class ParamValue(serializers.Field):
    """A work parameter's value as the form would have it typed: text (true and false as words, a number as
    its digits), cleaned as the form cleans it."""

    default_error_messages = {"invalid": "A parameter's value is text, a number, true or false."}

    def to_internal_value(self, data):
        if isinstance(data, bool):
            return "true" if data else "false"
        if data is None:
            return ""
        if not isinstance(data, int | float | str):
            self.fail("invalid")
        return clean_name(str(data))

    def to_representation(self, value):
        return value


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})
class Locations(serializers.Field):
    """The data's location as text, or a list of them: the parts of one dataset, joined in that order. Each is
    passed on as given (whitespace too), for the service to check."""

    default_error_messages = {"invalid": "Give a location as text, or the parts' locations as a list of text."}

    def to_internal_value(self, data):
        if isinstance(data, str):
            return data
        if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class S3CredentialsIn(Strict):
    access_key_id = serializers.CharField(required=False, allow_blank=True, max_length=128)
    secret_access_key = serializers.CharField(required=False, allow_blank=True, max_length=256)
    region = serializers.CharField(required=False, allow_blank=True, max_length=40)
    session_token = serializers.CharField(required=False, allow_blank=True, max_length=4096)


class WorkIn(Strict):
    kind = serializers.CharField(max_length=100)
    params = serializers.DictField(child=ParamValue(), required=False, default=dict)
    model_upload = serializers.UUIDField(required=False, allow_null=True, default=None)
    model_location = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=2000, trim_whitespace=False
    )
    model_from_job = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1)
    model_s3_credentials = S3CredentialsIn(required=False, allow_null=True, default=None)


class DataIn(Strict):
    upload = serializers.UUIDField(required=False, allow_null=True, default=None)
    location = Locations(required=False, default="")
    s3_credentials = S3CredentialsIn(required=False, allow_null=True, default=None)
    sha256 = serializers.CharField(required=False, allow_blank=True, default="", max_length=100)


class RequestIn(Strict):
    gpus = AsGiven()
    hours = AsGiven()
    shape = serializers.CharField(required=False, default=Job.Shape.SHORT_WIDE, max_length=20)
    deadline = serializers.CharField(  # ISO 8601, read by the service
        required=False, allow_null=True, allow_blank=True, default=None
    )
    allow_partial = serializers.BooleanField(required=False, default=False)
    kind = serializers.CharField(required=False, allow_blank=True, default="", max_length=20)  # fixed or flexible
    max_gpus = AsGiven(required=False, allow_null=True, default=None)


class RetentionIn(Strict):
    staged_days = AsGiven(required=False, default=0)
    output_days = AsGiven(required=False, allow_null=True, default=None)


class DryRun(serializers.Serializer):
    """The create's query string: whether it is a dry run, every check made and nothing else."""

    dry_run = serializers.BooleanField(required=False, default=False)


class JobIn(Strict):
    work = WorkIn()
    data = DataIn()
    request = RequestIn()
    retention = RetentionIn(required=False)
    sample = serializers.BooleanField(required=False, default=False)
    webhook_url = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False)


class PassIn(Strict):
    request = RequestIn()
    retention = RetentionIn(required=False)
    webhook_url = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False)


def _read(serializer: type[serializers.Serializer], request) -> dict:
    given = serializer(data=request.data)
    given.is_valid(raise_exception=True)
    return given.validated_data


def _request(given: dict) -> Request:
    return Request(
        given["gpus"],
        given["hours"],
        given["shape"],
        deadline=given["deadline"],
        allow_partial=given["allow_partial"],
        kind=given["kind"],
        max_gpus=given["max_gpus"],
    )


def _retention(given: dict | None) -> Retention:
    given = given or {}
    return Retention(given.get("staged_days", 0), output_days=given.get("output_days"))


def _credentials(given: dict | None) -> dict | None:
    """The S3 credentials given, as the form takes them: each cleaned, the blank ones left out."""
    if not given:
        return None
    cleaned = {
        name: (value.strip() if name == "secret_access_key" else clean_name(value)) for name, value in given.items()
    }
    return {name: value for name, value in cleaned.items() if value} or None


def _spec(given: dict, model: NamedFile | None) -> JobSpec:
    work, data = given["work"], given["data"]
    return JobSpec(
        Work(
            clean_name(work["kind"]),
            {clean_name(name): value for name, value in work["params"].items()},
            model,
            model_location=work["model_location"],
            model_from_job=work["model_from_job"],
            model_s3_credentials=_credentials(work["model_s3_credentials"]),
        ),
        Data(
            upload=data["upload"],
            location=data["location"] if isinstance(data["location"], str) else "",
            locations=() if isinstance(data["location"], str) else tuple(data["location"]),
            s3_credentials=_credentials(data["s3_credentials"]),
            sha256=clean_name(data["sha256"]),
        ),
        _request(given["request"]),
        _retention(given.get("retention")),
        sample=given["sample"],
    )


# The service's names for what it refuses, as docs/api.md names them.
FIELDS = {
    "work": "work.kind",
    "sha256": "data.sha256",
    "model": "work.model_upload",
    "model_s3_credentials": "work.model_s3_credentials",
    "gpus": "request.gpus",
    "hours": "request.hours",
    "shape": "request.shape",
    "request": "request.kind",
    "max_gpus": "request.max_gpus",
    "deadline": "request.deadline",
    "keep_days": "retention.staged_days",
    "output_days": "retention.output_days",
}


def refused(error: services.SubmitError, spec: JobSpec | None = None) -> ValidationError:
    """The service's refusals as one 400, each naming its value in the API's dotted names."""
    named: dict[str, list[str]] = {}
    for refusal in error.refusals:
        named.setdefault(_field(refusal.field, spec), []).append(refusal.message)
    return ValidationError(named)


def _field(field: str, spec: JobSpec | None) -> str:
    """The API's name for a field the service refused: a parameter's own, and for the model and the data the
    way it was given, where it was given one way."""
    if field.startswith("params."):
        return f"work.{field}"
    if field == "model" and spec is not None:
        given = [name for name in ("model_location", "model_from_job") if getattr(spec.work, name)]
        if len(given) == 1 and not spec.work.model:
            return f"work.{given[0]}"
    if field == "data" and spec is not None:
        ways = (("upload", spec.data.upload), ("location", spec.data.location or spec.data.locations))
        given = [name for name, value in ways if value]
        return f"data.{given[0]}" if len(given) == 1 else "data"
    return FIELDS.get(field, field)


def _created(request, job: Job, unsent: list[str], webhook_url: str) -> Response:
    """201 with the job as GET shows it, where it is, whether the task queue took it, and its own webhook's
    secret; the job counted against its token's rate of jobs made."""
    SubmitRate().made(request)
    job.refresh_from_db()
    answer = job_json(job)
    if webhook_url:
        _, answer["webhook_secret"] = endpoints.make(job.organisation, webhook_url, request.user, job=job)
    if unsent:
        answer["task_queue"] = "unreachable"
    return Response(answer, status=status.HTTP_201_CREATED, headers={"Location": reverse("api:job", args=[job.pk])})


def _model_file(organisation, upload_id, files: ExitStack) -> tuple[Upload | None, NamedFile | None]:
    """A finished upload sent as the work's model file, opened on `files`."""
    if upload_id is None:
        return None, None
    try:
        upload = services.finished_upload(organisation, upload_id, field="model")
    except services.SubmitError as error:
        raise refused(error) from None
    return upload, NamedFile(files.enter_context(upload.path.open("rb")), upload.filename)


def create(request) -> Response:
    """POST /api/v1/jobs/: the list of jobs (api.jobs.job_list) shares the route and answers a POST with this.
    With `?dry_run=1`, every check and nothing made: 200 with the job as it would be made."""
    dry_run = query(request, DryRun)["dry_run"]  # strictly: a misspelt dry run must not make the job
    organisation = organisation_for(request.user)
    given = _read(JobIn, request)
    webhook_url = given["webhook_url"] and endpoints.check_target("webhook_url", given["webhook_url"])
    if given["work"]["model_upload"] is not None and given["work"]["model_upload"] == given["data"]["upload"]:
        raise invalid("work.model_upload", "The model and the data are one upload: upload the model on its own.")
    with ExitStack() as files:
        model_upload, model = _model_file(organisation, given["work"]["model_upload"], files)
        spec = _spec(given, model)
        try:
            if dry_run:
                return Response(checked_json(services.check_job(organisation, spec)))
            with enqueue.unsent() as unsent:
                job = services.submit_job(organisation, request.user, spec)
        except services.SubmitError as error:
            raise refused(error, spec) from None
    if model_upload is not None:
        resumable.discard(model_upload)  # the model was copied into storage with the job
    return _created(request, job, unsent, webhook_url)


def _sample_for(request, pk: int) -> JobFacts:
    """The job's facts, if it is the organisation's (404) and a sample that measured the work (409): what the
    estimate and the pass need, before their query or body is read."""
    facts = JobFacts(services.get_job_for_user(request, pk))
    if not facts.measured:
        raise Conflict(NO_SAMPLE)
    return facts


@extend_schema(
    summary="A finished sample's estimate of the full pass: in each shape on the fleet now, and on `gpus`",
    parameters=[OpenApiParameter("gpus", int, description="GPUs for the pass; the sample's request by default")],
    responses=answers(OBJECT, 400, 403, 404, 409),
)
@api_view(["GET"])
def job_estimate(request, pk: int):
    facts = _sample_for(request, pk)
    raw = request.query_params.get("gpus")
    if raw is None:
        found = facts.planned_pass
    else:
        gpus = ascii_count(raw)
        found = facts.estimate(gpus) if gpus else None
        if found is None:
            raise invalid("gpus", f"Give a whole number of {facts.fleet.noun}s, not {shown(raw)}.")
        try:
            scheduling.check_fleet(gpus, facts.job.work)  # a pass on more would be refused: said now, in its words
        except scheduling.RequestError as error:
            raise invalid(error.field, str(error)) from None
    shapes = zip(("wide", "narrow"), facts.shapes, strict=False)
    return Response(
        {
            "job": facts.job.pk,
            "measured": facts.job.sample_result,
            "shapes": [{"shape": name, **shape.as_json()} for name, shape in shapes],
            "estimate": found.as_json(),
        }
    )


@extend_schema(
    summary="The full pass of a finished sample, on the data the sample staged",
    request=PassIn,
    parameters=[KEY_PARAMETER],
    responses=answers(OBJECT, 400, 403, 404, 409, ok_status=201),
)
@api_view(["POST"])
@throttle_classes([TokenRate, SubmitRate])
@idempotent
def job_pass(request, pk: int):
    sample = _sample_for(request, pk).job  # as on the page, the pass is offered for a measured sample only
    given = _read(PassIn, request)
    webhook_url = given["webhook_url"] and endpoints.check_target("webhook_url", given["webhook_url"])
    try:
        with enqueue.unsent() as unsent:
            job = services.submit_pass(
                sample, request.user, _request(given["request"]), _retention(given.get("retention"))
            )
    except services.SubmitError as error:
        if error.field == "sample":
            raise Conflict(str(error)) from None
        raise refused(error) from None
    return _created(request, job, unsent, webhook_url)
