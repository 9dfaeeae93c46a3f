"""The landing page, the design-partner program with its intake form, and the locked-out login."""

from math import ceil

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import redirect, render

from portal import throttling
from portal.forms import ApplicationForm
from portal.models import Application


def landing(request):
    if request.user.is_authenticated and hasattr(request.user, "membership"):
        return redirect("jobs:list")
    return render(request, "portal/landing.html")


def design_partners(request):
    return render(request, "portal/design_partners.html")


def apply(request):
    form = ApplicationForm(request.POST or None)
    if request.method == "POST" and (wait := throttling.intake_wait(request)):
        # The form comes back with what they typed, to send again once the hour is out.
        context = {"form": form, "wait_minutes": ceil(wait / 60)}
        return render(request, "portal/apply.html", context, status=429)
    if request.method == "POST" and form.is_valid():
        form.save()
        request.session["application"] = form.instance.pk
        return redirect("applied")  # so that a reload does not send the application again
    return render(request, "portal/apply.html", {"form": form}, status=400 if form.errors else 200)


def applied(request):
    """The thanks, to the browser that sent the application (its session remembers which)."""
    application = Application.objects.filter(pk=request.session.get("application")).first()
    if application is None:
        return redirect("apply")
    return render(request, "portal/applied.html", {"application": application})


def locked_out(request, original_response: HttpResponse | None, credentials: dict | None) -> HttpResponse:
    """What a login refused by the lockout answers (axes calls it, for the partners' page and the admin's)."""
    context = {
        "username": (credentials or {}).get("username") or request.POST.get("username", ""),
        "minutes": settings.E31_LOGIN_LOCKOUT_MINUTES,
    }
    return render(request, "registration/locked_out.html", context, status=429)
