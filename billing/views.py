"""The organisation's ledger: on a page, and exported as CSV and JSON; and each ended job's receipt."""

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Sum
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render

from billing import exports, summary
from billing.anchor import head_of
from billing.models import LedgerEntry
from jobs.scheduling import fleet
from jobs.services import get_job_for_user
from portal.listing import ListQuery, pager
from portal.models import organisation_for


def _entries(request, query: ListQuery):
    """The organisation's entries, newest first, of one job (another organisation's: 404) or ended in one month
    (UTC), as the query string asks; None for a user in no organisation."""
    organisation = organisation_for(request.user)
    if organisation is None:
        return None
    entries = LedgerEntry.objects.filter(organisation=organisation).order_by("-held_to", "-pk")
    if job := query.number("job", "job"):
        entries = entries.filter(job=get_job_for_user(request, job))
    if month := query.month():
        entries = entries.filter(held_to__gte=month.start, held_to__lt=month.end)
    return entries


@login_required
def ledger(request):
    """A page of the ledger, a row per job with its entries at no charge folded under it, with the totals of
    every entry the filters keep and links to export them all, entry by entry."""
    query = ListQuery(request.GET)
    entries = _entries(request, query)
    if entries is None:
        return render(request, "jobs/no_organisation.html", status=403)
    totals = entries.aggregate(gpu_hours=Sum("gpu_hours"), entries=Count("pk"))
    totals["amounts"] = exports.per_currency(entries)
    page = query.page(summary.jobs_newest_first(entries))
    months = summary.by_month(entries)
    context = {
        "jobs": summary.by_job(entries, [row["job"] for row in page.object_list]),
        "pager": pager(query, page),
        "query": query,
        "totals": totals,
        "months": months,
        "chart": summary.bar_chart(months),
    }
    return render(request, "billing/ledger.html", context)


def _export(request, respond, refuse):
    """The entries the filters keep, streamed by `respond` with the organisation's head; what `refuse` makes of a
    filter that means nothing (an export has no page to say it set one aside on)."""
    query = ListQuery(request.GET)
    entries = _entries(request, query)
    if entries is None:
        return refuse("Your account is not in an organisation.", 403)
    if query.set_aside:
        return refuse(query.problems, 400)
    return respond(entries, organisation_for(request.user))


@login_required
def ledger_csv(request):
    return _export(
        request, exports.csv_response, lambda text, status: HttpResponse(text, status=status, content_type="text/plain")
    )


@login_required
def ledger_json(request):
    return _export(request, exports.json_response, lambda text, status: JsonResponse({"error": text}, status=status))


@login_required
def receipt(request, job_id: int):
    """What an ended job was charged, line by line from its ledger entries, to print or keep, with the
    organisation's ledger head (billing.anchor); 404 for a job of another organisation, and for one that
    has not ended (its hold is not priced yet)."""
    job = get_job_for_user(request, job_id)
    if not job.ended:
        return render(request, "billing/receipt_pending.html", {"job": job}, status=404)
    entries = job.ledger_entries.order_by("held_from", "pk")
    totals = exports.per_currency(entries)
    noun = job.held_noun or fleet().noun  # what the job held, whatever the fleet has now
    context = {"job": job, "entries": entries, "totals": totals, "noun": noun, "head": head_of(job.organisation)}
    return render(request, "billing/receipt.html", context)
