"""Pages of jobs: the list, the form, a job's page with its live progress, cancel, and the output."""

from datetime import datetime
from functools import partial

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import FileResponse, Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseStopPolling

from billing.metering import meter_for
from billing.models import RetentionPolicy
from jobs import enqueue, lifecycle, services
from jobs.forms import JobForm, RequestForm
from jobs.models import ACTIVE, Job, Upload
from jobs.outputs.assemble import open_output_file, signed_output_url
from jobs.outputs.zipstream import stream_zip
from jobs.retention import output_due_at, purge_due_at
from jobs.scheduling import fleet, latest_start, on_hold_ahead, queue_position, sizing
from jobs.uploads import too_large_message


def _needs_organisation(request):
    return render(request, "jobs/no_organisation.html", status=403)


@login_required
@vary_on_headers("HX-Request")
def job_list(request):
    organisation = services.organisation_for(request.user)
    if organisation is None:
        return _needs_organisation(request)
    jobs = services.jobs_for_user(request.user)[:200]
    context = {"jobs": jobs, "polling": any(job.state in ACTIVE for job in jobs), "fleet": fleet()}
    template = "jobs/list.html#rows" if request.htmx else "jobs/list.html"
    return render(request, template, context)


@login_required
def job_new(request):
    organisation = services.organisation_for(request.user)
    if organisation is None:
        return _needs_organisation(request)
    policy = RetentionPolicy.in_force(organisation)
    form = JobForm(request.POST, request.FILES, policy=policy) if request.method == "POST" else JobForm(policy=policy)
    if request.method == "POST":
        if getattr(request, "upload_too_large", False):
            form.add_error(None, too_large_message())
        elif form.is_valid():
            uploaded_file, model = form.cleaned_data["data"], form.cleaned_data["model"]
            try:
                with enqueue.unsent() as unsent:
                    job = services.submit_job(
                        organisation=organisation,
                        user=request.user,
                        data=uploaded_file.file if uploaded_file else None,
                        data_name=uploaded_file.name if uploaded_file else "",
                        upload=_resumable_upload(organisation, form.cleaned_data["upload"]),
                        location=form.cleaned_data["location"],
                        s3_credentials=form.s3_credentials(),
                        work=form.cleaned_data["work"],
                        params=form.params(),
                        gpus=form.cleaned_data["gpus"],
                        hours=form.cleaned_data["hours"],
                        shape=form.cleaned_data["shape"],
                        deadline=form.cleaned_data["deadline"],
                        retention_days=form.retention_days(),
                        output_keep_days=form.cleaned_data["output_days"],
                        expected_sha256=form.cleaned_data["sha256"],
                        allow_partial=form.cleaned_data["allow_partial"],
                        sample=form.cleaned_data["sample"],
                        model=model.file if model else None,
                        model_name=model.name if model else "",
                    )
            except services.SubmitError as error:
                form.add_error(form.field_for(error.field, str(error)), str(error))
            else:
                _say_if_not_staging(request, job, unsent)
                return redirect("jobs:detail", pk=job.pk)
    status = 400 if form.errors else 200
    context = {
        "form": form,
        "fleet": fleet(),
        "max_upload_bytes": settings.E31_MAX_UPLOAD_BYTES,
        "max_dataset_bytes": settings.E31_MAX_DATASET_BYTES,
        "chunk_bytes": settings.E31_UPLOAD_CHUNK_BYTES,
        "pending_upload": _pending_upload(form, organisation),
    }
    return render(request, "jobs/new.html", context, status=status)


def _say_if_not_staging(request, job: Job, unsent: list[str]) -> None:
    if unsent:
        messages.warning(request, f"{enqueue.UNREACHABLE}: job {job.pk} is recorded and is staged once it is back.")


def _pending_upload(form, organisation) -> Upload | None:
    """The finished upload a form sent back with errors still names, so it need not be sent again."""
    upload_id = form.cleaned_data.get("upload") if form.is_bound and hasattr(form, "cleaned_data") else None
    if not upload_id:
        return None
    upload = Upload.objects.filter(organisation=organisation, pk=upload_id).first()
    return upload if upload and upload.complete and not upload.expired else None


def _resumable_upload(organisation, upload_id) -> Upload | None:
    if upload_id is None:
        return None
    try:
        return Upload.objects.get(organisation=organisation, pk=upload_id)
    except Upload.DoesNotExist:
        gone = "That upload is gone: it expired or was used. Upload the file again."
        raise services.SubmitError("data", gone) from None


def _sizing_context(job, pass_form: RequestForm | None = None) -> dict:
    """A finished sample's figures, its estimate for each shape, and the form of the full pass."""
    result = job.sample_result
    if job.kind != Job.Kind.SAMPLE or not result.get("records_per_second"):
        return {}
    online = fleet().online
    if pass_form is None:
        request = result.get("request", {})
        found = sizing.estimate(result, max(1, min(int(request.get("gpus", 1)), online)))
        retention = request.get("retention_days", 0)
        policy = RetentionPolicy.in_force(job.organisation)
        pass_form = RequestForm(
            initial={
                "gpus": found.gpus,
                "hours": found.hours,
                "retention": "keep" if retention else "delete",
                "keep_days": min(retention or 7, policy.max_staged_days) or None,
                "output_days": request.get("output_keep_days", policy.output_days),
                "deadline": request.get("deadline") and datetime.fromisoformat(request["deadline"]),
            },
            policy=policy,
        )
    else:
        found = _pass_estimate(job, pass_form)
    return {"shapes": sizing.shapes(result, online), "pass_form": pass_form, "pass_estimate": found}


def _pass_estimate(job, pass_form: RequestForm):
    try:
        gpus = pass_form.fields["gpus"].clean(pass_form["gpus"].value())
    except ValidationError:
        return None
    return sizing.estimate(job.sample_result, gpus)


def _detail_context(job, pass_form: RequestForm | None = None) -> dict:
    return {
        **_sizing_context(job, pass_form),
        "job": job,
        "progress": services.progress(job),
        "meter": meter_for(job),
        "events": job.events.all(),
        "allocations": job.allocations.select_related("gpu__node"),
        "position": queue_position(job),
        "latest_start": latest_start(job),
        "on_hold_ahead": on_hold_ahead(job),
        "fleet": fleet(),
        "purge_due": purge_due_at(job),
        "output_due": output_due_at(job),
        "copy_taken_by": _copy_taken_by(job),
        "output_files": job.output_names,
        "staging_phase_mb_per_s": job.staging_rate / 1e6 if job.staging_rate else None,
        "sample_seconds": settings.E31_SAMPLE_SECONDS,
        "shard_seconds": settings.E31_SHARD_SECONDS,
    }


def _copy_taken_by(job: Job) -> Job | None:
    """The full pass that took a sample's staged copy over: its retention governs the copy now."""
    if job.kind != Job.Kind.SAMPLE or job.staged_path or job.staged_purged_at or job.input_bytes is None:
        return None
    return job.passes.exclude(input_bytes=None).order_by("pk").first()


@login_required
def job_detail(request, pk: int):
    job = services.get_job_for_user(request, pk)
    return render(request, "jobs/detail.html", _detail_context(job))


@login_required
def job_estimate(request, pk: int):
    """The full pass on the GPUs typed into a sample's pass form: the hours to ask for follow them."""
    job = services.get_job_for_user(request, pk)
    if job.kind != Job.Kind.SAMPLE or not job.sample_result.get("records_per_second"):
        raise Http404("This job is no finished sample.")
    policy = RetentionPolicy.in_force(job.organisation)
    form = RequestForm(request.GET, policy=policy)
    found = _pass_estimate(job, form)
    if found is not None:
        form = RequestForm(initial={"gpus": found.gpus, "hours": found.hours}, policy=policy)
    context = {"job": job, "pass_form": form, "pass_estimate": found, "fleet": fleet()}
    return render(request, "jobs/detail.html#pass-estimate", context)


@login_required
@require_POST
def job_pass(request, pk: int):
    """Submit the full pass a sample sized; its data is the sample's staged copy."""
    sample = services.get_job_for_user(request, pk)
    form = RequestForm(request.POST, policy=RetentionPolicy.in_force(sample.organisation))
    if form.is_valid():
        try:
            with enqueue.unsent() as unsent:
                job = services.submit_pass(
                    sample,
                    user=request.user,
                    gpus=form.cleaned_data["gpus"],
                    hours=form.cleaned_data["hours"],
                    deadline=form.cleaned_data["deadline"],
                    retention_days=form.retention_days(),
                    output_keep_days=form.cleaned_data["output_days"],
                    allow_partial=form.cleaned_data["allow_partial"],
                )
        except services.SubmitError as error:
            form.add_error(error.field if error.field in form.fields else None, str(error))
        else:
            _say_if_not_staging(request, job, unsent)
            return redirect("jobs:detail", pk=job.pk)
    return render(request, "jobs/detail.html", _detail_context(sample, form), status=400)


@login_required
def job_progress(request, pk: int):
    """The live part of a job's page; 286 tells htmx to stop polling once the job has ended."""
    job = services.get_job_for_user(request, pk)
    html = render_to_string("jobs/detail.html#progress", _detail_context(job), request=request)
    return HttpResponseStopPolling(html) if job.ended else HttpResponse(html)


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = services.get_job_for_user(request, pk)
    holding = job.allocations.filter(held_to__isnull=True).exists()
    with enqueue.unsent() as unsent:
        cancelled = lifecycle.cancel(job, by=request.user)
    if cancelled:
        noun = fleet().noun
        held = f"its {noun}s are released" if holding else f"it held no {noun}s"
        messages.success(request, f"Job {job.pk} is cancelled; {held}.")
        if unsent:
            messages.warning(request, f"{enqueue.UNREACHABLE}; the cancel stands.")
    else:
        job.refresh_from_db()
        messages.info(request, f"Job {job.pk} is {job.get_state_display().lower()} and can no longer be cancelled.")
    return redirect("jobs:detail", pk=job.pk)


@login_required
def job_output(request, pk: int):
    """All of the output as one zip, written while it downloads."""
    job = services.get_job_for_user(request, pk)
    if job.output_purged_at:
        return _output_gone(request, job)
    if not job.output_path:
        raise Http404("This job has no output.")
    files = [(name, partial(open_output_file, job, name)) for name in job.output_names]
    response = StreamingHttpResponse(stream_zip(files), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="job-{job.pk}-output.zip"'
    return response


@login_required
def job_output_file(request, pk: int, name: str):
    """One output file: from S3, a redirect to a signed URL that expires (the bytes do not pass through
    the portal); from the filesystem, streamed."""
    job = services.get_job_for_user(request, pk)
    if job.output_purged_at:
        return _output_gone(request, job)
    if name not in job.output_names:
        raise Http404("This job has no such output file.")
    filename = f"job-{job.pk}-{name}"
    signed = signed_output_url(job, name, filename)
    if signed:
        return redirect(signed)
    return FileResponse(open_output_file(job, name), as_attachment=True, filename=filename)


def _output_gone(request, job: Job) -> HttpResponse:
    """410: the output was there, and its retention is up."""
    return render(request, "jobs/output_gone.html", {"job": job}, status=410)
