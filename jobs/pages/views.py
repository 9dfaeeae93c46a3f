"""Pages of jobs: the list, the form, a job's page with its live progress, cancel, and the output."""

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import partial

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import OuterRef, Q, Subquery, Sum
from django.http import FileResponse, Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseStopPolling

from billing.models import MONEY, LedgerEntry, RateCard, RetentionPolicy
from jobs import enqueue, lifecycle, services
from jobs.facts import JobFacts
from jobs.models import ACTIVE, Job, State, Upload
from jobs.outputs.assemble import open_output_file, signed_output_url
from jobs.outputs.zipstream import stream_zip
from jobs.pages.charts import PageFacts
from jobs.pages.forms import JobForm, RequestForm, asked_again
from jobs.scheduling import fleet
from jobs.uploads import too_large_message
from portal.listing import ListQuery, pager
from portal.models import organisation_for
from portal.sent_once import made, sent_once
from portal.text import CountField, ascii_count


def _needs_organisation(request):
    return render(request, "jobs/no_organisation.html", status=403)


def _listed_jobs(request, query: ListQuery):
    """The organisation's jobs as the query string filters them, newest first, each with what it was billed
    (its ledger entries added up, in their currency) read in the same query."""
    entries = LedgerEntry.objects.filter(job=OuterRef("pk")).order_by()
    billed = entries.values("job").annotate(total=Sum("amount")).values("total")
    jobs = services.jobs_for_user(request.user).order_by("-created", "-pk")
    jobs = jobs.annotate(billed=Subquery(billed), billed_currency=Subquery(entries.values("currency")[:1]))
    if state := query.choice("state", dict(State.choices), "state"):
        jobs = jobs.filter(state=state)
    if kind := query.choice("kind", dict(Job.Kind.choices), "kind"):
        jobs = jobs.filter(kind=kind)
    if month := query.month():
        jobs = jobs.filter(created__gte=month.start, created__lt=month.end)
    if search := query.text("q"):
        number = ascii_count(search.removeprefix("#"))
        jobs = jobs.filter(Q(pk=number) if number else Q(source_name__icontains=search))
    return jobs


@login_required
@vary_on_headers("HX-Request")
def job_list(request):
    """A page of the organisation's jobs, filtered by state, kind and the month they were submitted in, or
    found by number or data name; the rows refresh themselves while one of them is active."""
    organisation = organisation_for(request.user)
    if organisation is None:
        return _needs_organisation(request)
    query = ListQuery(request.GET)
    page = query.page(_listed_jobs(request, query))
    context = {
        "jobs": page.object_list,
        "pager": pager(query, page),
        "query": query,
        "states": State.choices,
        "kinds": Job.Kind.choices,
        "polling": any(job.state in ACTIVE for job in page.object_list),
    }
    template = "jobs/list.html#rows" if request.htmx else "jobs/list.html"
    return render(request, template, context)


@login_required
@sent_once("job")
def job_new(request):
    organisation = organisation_for(request.user)
    if organisation is None:
        return _needs_organisation(request)
    policy = RetentionPolicy.in_force(organisation)
    kept = services.kept_models(organisation)
    again, still_to_give = None, ""
    if request.method == "POST":
        form = JobForm(request.POST, request.FILES, policy=policy, kept_models=kept)
    elif "again" in request.GET:
        again = services.get_job_for_user(request, ascii_count(request.GET["again"]) or 0)
        initial, still_to_give = asked_again(again, kept)
        form = JobForm(initial=initial, policy=policy, kept_models=kept)
    else:
        form = JobForm(policy=policy, kept_models=kept)
    if request.method == "POST":
        if getattr(request, "upload_too_large", False):
            form.add_error(None, too_large_message())
        elif job := _submit(request, form, lambda: services.submit_job(organisation, request.user, form.spec())):
            return _made(request, job)
    status = 400 if form.errors else 200
    card = RateCard.in_force()
    context = {
        "form": form,
        "rate_card": card,
        "most_cost": _most_cost(form, card),
        "max_upload_bytes": settings.E31_MAX_UPLOAD_BYTES,
        "max_dataset_bytes": settings.E31_MAX_DATASET_BYTES,
        "chunk_bytes": settings.E31_UPLOAD_CHUNK_BYTES,
        "pending_upload": _pending_upload(form, organisation),
        "again": again,
        "still_to_give": still_to_give,
    }
    return render(request, "jobs/new.html", context, status=status)


EXAMPLE_DATASET = settings.BASE_DIR / "examples" / "customers.csv"


@login_required
def example_dataset(request):
    """A dataset to try the portal with (examples/customers.csv: customers, a few records malformed on
    purpose), for a partner who has none at hand."""
    return FileResponse(EXAMPLE_DATASET.open("rb"), as_attachment=True, filename="customers.csv")


def _most_cost(form: RequestForm, card: RateCard | None) -> Decimal | None:
    """The most the request the form holds can cost: GPUs × hours × the rate (either shape holds as many
    GPU-hours), as the page shows it before JavaScript takes over; None without a rate or a request."""
    gpus = ascii_count(str(form["gpus"].value() or "").strip())
    try:
        hours = Decimal(str(form["hours"].value() or "").strip())
        if card is None or not gpus or not hours.is_finite() or hours <= 0 or hours > settings.E31_MAX_HOURS:
            return None
        return (gpus * hours * card.rate_per_gpu_hour).quantize(MONEY)
    except InvalidOperation:  # not a number, or a sum past Decimal's 28 digits (10**30 GPUs): none to show
        return None


def _submit(request, form: RequestForm, submit: Callable[[], Job]) -> Job | None:
    """The job `submit` makes from a valid form, said if it waits for the job queue; None when it is
    refused, the reason put on the form."""
    if not form.is_valid():
        return None
    try:
        with enqueue.unsent() as unsent:
            job = submit()
    except services.SubmitError as error:
        for refusal in error.refusals:
            form.add_error(form.field_for(refusal.field), refusal.message)
        return None
    if unsent:
        messages.warning(request, f"{enqueue.UNREACHABLE}: job {job.pk} is recorded and is staged once it is back.")
    return job


def _made(request, job: Job):
    """To the job's page, where a second post of the form that made it lands too."""
    page = reverse("jobs:detail", args=[job.pk])
    made(request, page, f"job #{job.pk}")
    return redirect(page)


def _pending_upload(form, organisation) -> Upload | None:
    """The finished upload a form sent back with errors still names, so it need not be sent again."""
    upload_id = form.cleaned_data.get("upload") if form.is_bound and hasattr(form, "cleaned_data") else None
    if not upload_id:
        return None
    upload = Upload.objects.filter(organisation=organisation, pk=upload_id).first()
    return upload if upload and upload.complete and not upload.expired else None


def _sizing_context(facts: JobFacts, pass_form: RequestForm | None = None) -> dict:
    """A finished sample's form of the full pass, and the estimate beside it."""
    job = facts.job
    if not facts.measured:
        return {}
    if pass_form is None:
        request = job.sample_result.get("request", {})
        found = facts.planned_pass
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
        found = _pass_estimate(facts, pass_form)
    return {"pass_form": pass_form, "pass_estimate": found}


def _pass_estimate(facts: JobFacts, pass_form: RequestForm):
    """The estimate for the GPUs typed, while they are a count the estimate can be worked out for."""
    try:
        gpus = CountField(min_value=1).clean(pass_form["gpus"].value())
    except ValidationError:
        return None
    return facts.estimate(gpus)


def _detail_context(job, pass_form: RequestForm | None = None) -> dict:
    facts = PageFacts(job)
    return {
        **_sizing_context(facts, pass_form),
        "job": job,
        "facts": facts,
        "sample_seconds": settings.E31_SAMPLE_SECONDS,
        "shard_seconds": settings.E31_SHARD_SECONDS,
    }


@login_required
def job_detail(request, pk: int):
    job = services.get_job_for_user(request, pk)
    return render(request, "jobs/detail.html", _detail_context(job))


@login_required
def job_estimate(request, pk: int):
    """The full pass on the GPUs typed into a sample's pass form: the hours to ask for follow them."""
    job = services.get_job_for_user(request, pk)
    facts = JobFacts(job)
    if not facts.measured:
        raise Http404("This job is not a finished sample, so it sized no pass.")
    policy = RetentionPolicy.in_force(job.organisation)
    form = RequestForm(request.GET, policy=policy)
    found = _pass_estimate(facts, form)
    if found is not None:
        form = RequestForm(initial={"gpus": found.gpus, "hours": found.hours}, policy=policy)
    context = {"job": job, "pass_form": form, "pass_estimate": found}
    return render(request, "jobs/detail.html#pass-estimate", context)


@login_required
@require_POST
@sent_once("pass")
def job_pass(request, pk: int):
    """Submit the full pass a sample sized; its data is the sample's staged copy."""
    sample = services.get_job_for_user(request, pk)
    form = RequestForm(request.POST, policy=RetentionPolicy.in_force(sample.organisation))
    job = _submit(request, form, lambda: services.submit_pass(sample, request.user, form.request(), form.kept_for()))
    if job:
        return _made(request, job)
    return render(request, "jobs/detail.html", _detail_context(sample, form), status=400)


@login_required
def job_progress(request, pk: int):
    """The live part of a job's page, its status card; 286 tells htmx to stop polling once the job has
    ended. When its state is not the one the page shows (`shown`), the panels below come too, swapped
    in out of band: they change with the state only."""
    job = services.get_job_for_user(request, pk, JobFacts.counting_shards(Job.objects.all()))
    facts = JobFacts(job)
    html = render_to_string("jobs/detail.html#progress", {"job": job, "facts": facts}, request=request)
    if request.GET.get("shown") != job.state:
        context = {**_detail_context(job), "out_of_band": True}
        html += render_to_string("jobs/detail.html#heading", context, request=request)  # "Submit again" once ended
        html += render_to_string("jobs/detail.html#panels", context, request=request)
    return HttpResponseStopPolling(html) if job.ended else HttpResponse(html)


@login_required
def job_charts(request, pk: int):
    """The job's charts, polled on their own, slower than the status card, while the job runs; 286 once
    it has ended (the panels that come with its end carry the last of them)."""
    job = services.get_job_for_user(request, pk)
    html = render_to_string("jobs/detail.html#charts", {"job": job, "facts": PageFacts(job)}, request=request)
    return HttpResponseStopPolling(html) if job.ended else HttpResponse(html)


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = services.get_job_for_user(request, pk)
    holding = job.allocations.filter(held_to__isnull=True).count()
    with enqueue.unsent() as unsent:
        cancelled = lifecycle.cancel(job, by=request.user)
    if cancelled:
        noun = fleet().noun
        held = f"it held no {noun}s"
        if holding:
            held = f"its {noun}{pluralize(holding)} {pluralize(holding, 'is,are')} released"
        messages.success(request, f"Job #{job.pk} is cancelled; {held}.")
        if unsent:
            messages.warning(request, f"{enqueue.UNREACHABLE}; the cancel stands.")
    else:
        job.refresh_from_db()
        state = job.get_state_display().lower()
        messages.info(request, f"Job #{job.pk} has ended ({state}) and can no longer be cancelled.")
    return redirect("jobs:detail", pk=job.pk)


@login_required
def job_output(request, pk: int):
    """All of the output as one zip, written while it downloads."""
    job = services.get_job_for_user(request, pk)
    if job.output_purged_at:
        return _output_gone(request, job)
    if not job.output_path:
        raise Http404("This job has no output.")
    # Each file named as it is when downloaded alone, dated when the job ended (in UTC).
    files = [(_download_name(job, name), partial(open_output_file, job, name)) for name in job.output_names]
    dated = (job.ended_at or datetime.now(UTC)).astimezone(UTC)
    response = StreamingHttpResponse(stream_zip(files, dated), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="job-{job.pk}-output.zip"'
    return response


def _download_name(job: Job, name: str) -> str:
    return f"job-{job.pk}-{name}"


@login_required
def job_output_file(request, pk: int, name: str):
    """One output file: from S3, a redirect to a signed URL that expires (the bytes do not pass through
    the portal); from the filesystem, streamed."""
    job = services.get_job_for_user(request, pk)
    if job.output_purged_at:
        return _output_gone(request, job)
    if name not in job.output_names:
        raise Http404("This job has no such output file.")
    filename = _download_name(job, name)
    signed = signed_output_url(job, name, filename)
    if signed:
        return redirect(signed)
    return FileResponse(open_output_file(job, name), as_attachment=True, filename=filename)


def _output_gone(request, job: Job) -> HttpResponse:
    """410: the output was there, and its retention is up."""
    return render(request, "jobs/output_gone.html", {"job": job}, status=410)
