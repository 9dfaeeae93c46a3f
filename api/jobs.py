"""The job routes (docs/api.md, "Jobs"): the list, one job, its timeline, its manifest and output files, cancel
and the receipt. Each finds its job through jobs.services.get_job_for_user, the pages' one access helper: a job
of another organisation is 404."""

import json

from django.core.files.storage import default_storage
from django.shortcuts import redirect
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view, throttle_classes
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from api import submit
from api.errors import Conflict, Gone
from api.idempotency import KEY_PARAMETER, idempotent
from api.negotiation import any_accept
from api.pagination import PageParameters, Pages, query
from api.ranges import ranged_file_response
from api.representation import event_json, job_json
from api.schema import OBJECT, answers
from api.throttling import SubmitRate, TokenRate
from billing.anchor import head_of
from billing.exports import per_currency
from billing.metering import ledger_row
from billing.models import MONEY
from jobs import enqueue, lifecycle
from jobs.models import Job, State
from jobs.outputs.assemble import open_output_file, signed_output_url
from jobs.services import get_job_for_user, jobs_for_user
from portal.text import shown

DATE_OR_TIME = ["iso-8601", "%Y-%m-%d"]


class JobFilters(PageParameters):
    """The list's filters, each optional; a value that is not one of its kind is refused, naming it."""

    state = serializers.ChoiceField(
        choices=State.choices,
        required=False,
        error_messages={"invalid_choice": f'"{{input}}" is not a valid choice: a state is one of {", ".join(State)}.'},
    )
    kind = serializers.ChoiceField(
        choices=Job.Kind.choices,
        required=False,
        error_messages={"invalid_choice": '"{input}" is not a valid choice: a kind is pass or sample.'},
    )
    work = serializers.CharField(required=False, max_length=60)
    created_after = serializers.DateTimeField(required=False, input_formats=DATE_OR_TIME)
    created_before = serializers.DateTimeField(required=False, input_formats=DATE_OR_TIME)


@extend_schema(
    methods=["GET"],
    operation_id="jobs_list",
    summary="The organisation's jobs, newest first",
    parameters=[JobFilters],
    responses=answers(OBJECT, 400, 403),
)
@extend_schema(
    methods=["POST"],
    operation_id="jobs_create",
    summary="Make a job: its work, data (an upload's id, a URL, s3:// or a server path), request and retention",
    parameters=[
        OpenApiParameter(
            "dry_run", bool, description="Make every check and nothing else: 200 with the job as it would be made"
        ),
        KEY_PARAMETER,
    ],
    request=submit.JobIn,
    responses={**answers(OBJECT, 400, 403, ok_status=201), 200: OBJECT},
)
@api_view(["GET", "POST"])
@throttle_classes([TokenRate, SubmitRate])
@idempotent
def job_list(request):
    if request.method == "POST":
        return submit.create(request)
    wanted = query(request, JobFilters)
    jobs = jobs_for_user(request.user).order_by("-created", "-pk")
    for name in ("state", "kind", "work"):
        if name in wanted:
            jobs = jobs.filter(**{name: wanted[name]})
    if "created_after" in wanted:
        jobs = jobs.filter(created__gte=wanted["created_after"])
    if "created_before" in wanted:
        jobs = jobs.filter(created__lt=wanted["created_before"])
    pages = Pages()
    page = pages.paginate_queryset(jobs, request)
    return pages.get_paginated_response([job_json(job) for job in page])


@extend_schema(operation_id="job", summary="One job with its live figures", responses=answers(OBJECT, 403, 404))
@api_view(["GET"])
def job_detail(request, pk: int):
    return Response(job_json(get_job_for_user(request, pk)))


@extend_schema(
    operation_id="job_events", summary="The job's timeline, oldest first", responses=answers(OBJECT, 403, 404)
)
@api_view(["GET"])
def job_events(request, pk: int):
    job = get_job_for_user(request, pk)
    return Response([event_json(event) for event in job.events.all()])


def _output_of(job: Job) -> None:
    """410 once the output's retention is up, in the sentence of the page's."""
    if job.output_purged_at:
        days = f"{job.output_keep_days} day{'s' * (job.output_keep_days != 1)}"
        raise Gone(
            f"The output of job {job.pk} has been deleted: it was kept {days} after the job ended, as chosen "
            f"when the job was submitted, and deleted on {job.output_purged_at:%Y-%m-%d %H:%M} UTC."
        )


@extend_schema(
    operation_id="job_manifest", summary="The output's manifest.json", responses=answers(OBJECT, 403, 404, 410)
)
@api_view(["GET"])
def job_manifest(request, pk: int):
    job = get_job_for_user(request, pk)
    _output_of(job)
    if "manifest.json" not in job.output_names:
        raise _no_output(job)
    with open_output_file(job, "manifest.json") as file:
        return Response(json.load(file))


def _no_output(job: Job, name: str = "") -> NotFound:
    what = f"no output file {shown(name)}" if name and job.output_names else "no output yet"
    return NotFound(f"Job {job.pk} has {what}.")


@extend_schema(
    operation_id="job_output_file",
    summary="One output file: HTTP Range for a resumable download, or a redirect to a signed URL on S3",
    responses={**answers(bytes, 403, 404, 410), 206: bytes, 302: None, 416: OBJECT},
)
@api_view(["GET", "HEAD"])
@any_accept
def job_output_file(request, pk: int, name: str):
    job = get_job_for_user(request, pk)
    _output_of(job)
    if name not in job.output_names:
        raise _no_output(job, name)
    filename = f"job-{job.pk}-{name}"
    signed = signed_output_url(job, name, filename)
    if signed:
        return redirect(signed)
    path = f"{job.output_path}/{name}"
    size = default_storage.size(path)
    etag = f'"{job.pk}-{size:x}-{int(default_storage.get_modified_time(path).timestamp()):x}"'
    return ranged_file_response(request, open_output_file(job, name), size, filename, etag)


@extend_schema(
    operation_id="job_cancel", summary="Cancel the job", request=None, responses=answers(OBJECT, 403, 404, 409)
)
@api_view(["POST"])
def job_cancel(request, pk: int):
    job = get_job_for_user(request, pk)
    with enqueue.unsent() as unsent:
        cancelled = lifecycle.cancel(job, by=request.user)
    job.refresh_from_db()
    if not cancelled:
        raise Conflict(f"Job {job.pk} has ended ({job.get_state_display().lower()}) and can no longer be cancelled.")
    answer = job_json(job)
    if unsent:
        answer["task_queue"] = "unreachable"
    return Response(answer)


@extend_schema(operation_id="job_receipt", summary="An ended job's receipt", responses=answers(OBJECT, 403, 404, 409))
@api_view(["GET"])
def job_receipt(request, pk: int):
    job = get_job_for_user(request, pk)
    if not job.ended:
        raise Conflict(
            f"Job {job.pk} is {job.get_state_display().lower()}. Its receipt is issued when it ends, "
            "once its hold is priced."
        )
    entries = job.ledger_entries.order_by("held_from", "pk")
    totals = per_currency(entries)
    return Response(
        {
            "job": job.pk,
            "reference": f"E31-{job.organisation.slug}-{job.pk}",
            "entries": [ledger_row(entry) for entry in entries],
            "totals": [
                {"currency": total["currency"], "amount": str(total["amount"].quantize(MONEY))} for total in totals
            ],
            "ledger_head": head_of(job.organisation).as_json(),
        }
    )
