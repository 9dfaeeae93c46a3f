"""Pages of jobs: the list, the form, a job's page with its live progress, cancel, and the output."""

from functools import partial

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseStopPolling

from billing.metering import meter_for
from jobs import lifecycle, services
from jobs.forms import JobForm
from jobs.models import ACTIVE
from jobs.outputs.assemble import OUTPUT_FILES, open_output_file
from jobs.outputs.zipstream import stream_zip
from jobs.retention import purge_due_at
from jobs.scheduling import fleet, queue_position
from jobs.staging.uploads import too_large_message


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
    form = JobForm(request.POST, request.FILES) if request.method == "POST" else JobForm()
    if request.method == "POST":
        if getattr(request, "upload_too_large", False):
            form.add_error(None, too_large_message())
        elif form.is_valid():
            upload = form.cleaned_data["data"]
            try:
                job = services.submit_job(
                    organisation=organisation,
                    user=request.user,
                    data=upload.file if upload else None,
                    data_name=upload.name if upload else "",
                    location=form.cleaned_data["location"],
                    work=form.cleaned_data["work"],
                    params=form.params(),
                    gpus=form.cleaned_data["gpus"],
                    hours=form.cleaned_data["hours"],
                    shape=form.cleaned_data["shape"],
                    retention_days=form.retention_days(),
                )
            except services.SubmitError as error:
                field = "location" if error.field == "data" and not upload else error.field
                form.add_error(field if field in form.fields else None, str(error))
            else:
                return redirect("jobs:detail", pk=job.pk)
    status = 400 if form.errors else 200
    context = {"form": form, "fleet": fleet(), "max_upload_bytes": settings.E31_MAX_UPLOAD_BYTES}
    return render(request, "jobs/new.html", context, status=status)


def _detail_context(job) -> dict:
    return {
        "job": job,
        "progress": services.progress(job),
        "meter": meter_for(job),
        "events": job.events.all(),
        "allocations": job.allocations.select_related("gpu__node"),
        "position": queue_position(job),
        "fleet": fleet(),
        "purge_due": purge_due_at(job),
        "output_files": OUTPUT_FILES if job.output_path else (),
        "staging_phase_mb_per_s": job.staging_rate / 1e6 if job.staging_rate else None,
    }


@login_required
def job_detail(request, pk: int):
    job = services.get_job_for_user(request, pk)
    return render(request, "jobs/detail.html", _detail_context(job))


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
    if lifecycle.cancel(job, by=request.user):
        messages.success(request, f"Job {job.pk} is cancelled; its GPUs are released.")
    else:
        job.refresh_from_db()
        messages.info(request, f"Job {job.pk} is {job.get_state_display().lower()} and can no longer be cancelled.")
    return redirect("jobs:detail", pk=job.pk)


@login_required
def job_output(request, pk: int):
    """All of the output as one zip, written while it downloads."""
    job = services.get_job_for_user(request, pk)
    if not job.output_path:
        raise Http404("This job has no output.")
    files = [(name, partial(open_output_file, job, name)) for name in OUTPUT_FILES]
    response = StreamingHttpResponse(stream_zip(files), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="job-{job.pk}-output.zip"'
    return response


@login_required
def job_output_file(request, pk: int, name: str):
    job = services.get_job_for_user(request, pk)
    if not job.output_path or name not in OUTPUT_FILES:
        raise Http404("This job has no such output file.")
    return FileResponse(open_output_file(job, name), as_attachment=True, filename=f"job-{job.pk}-{name}")
