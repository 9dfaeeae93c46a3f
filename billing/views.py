"""The organisation's ledger: on a page, and exported as CSV and JSON; and each ended job's receipt."""

from django.contrib.auth.decorators import login_required
from django.db.models import Sum
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render

from billing import exports
from billing.models import LedgerEntry
from jobs.scheduling import fleet
from jobs.services import get_job_for_user
from portal.models import organisation_for


def _entries(request):
    organisation = organisation_for(request.user)
    if organisation is None:
        return None
    return LedgerEntry.objects.filter(organisation=organisation).order_by("-held_to", "-pk")


@login_required
def ledger(request):
    entries = _entries(request)
    if entries is None:
        return render(request, "jobs/no_organisation.html", status=403)
    totals = entries.aggregate(gpu_hours=Sum("gpu_hours"))
    totals["amounts"] = exports.per_currency(entries)
    context = {"entries": entries, "totals": totals}
    return render(request, "billing/ledger.html", context)


@login_required
def ledger_csv(request):
    entries = _entries(request)
    if entries is None:
        return HttpResponse("Your account is not in an organisation.", status=403, content_type="text/plain")
    return exports.csv_response(entries)


@login_required
def ledger_json(request):
    entries = _entries(request)
    if entries is None:
        return JsonResponse({"error": "Your account is not in an organisation."}, status=403)
    return exports.json_response(entries)


@login_required
def receipt(request, job_id: int):
    """What an ended job was charged, line by line from its ledger entries, to print or keep; 404 for a
    job of another organisation, and for one that has not ended (its hold is not priced yet)."""
    job = get_job_for_user(request, job_id)
    if not job.ended:
        return render(request, "billing/receipt_pending.html", {"job": job}, status=404)
    entries = job.ledger_entries.order_by("held_from", "pk")
    totals = exports.per_currency(entries)
    noun = job.held_noun or fleet().noun  # what the job held, whatever the fleet has now
    context = {"job": job, "entries": entries, "totals": totals, "noun": noun}
    return render(request, "billing/receipt.html", context)
