"""The landing page, the design-partner program with its intake form, the locked-out login and the password
reset's first step."""

from math import ceil

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.views import defaults

from jobs import enqueue
from portal import throttling, units
from portal.forms import ApplicationForm, ResetForm, reset_days
from portal.models import Application, organisation_for
from portal.sent_once import made, sent_once


def landing(request):
    if request.user.is_authenticated and hasattr(request.user, "membership"):
        return redirect("jobs:list")
    return render(request, "portal/landing.html")


def favicon(request):
    return redirect(static("favicon.svg"), permanent=True)


def design_partners(request):
    return render(request, "portal/design_partners.html")


@sent_once("application")
def apply(request):
    form = ApplicationForm(request.POST or None)
    if request.method == "POST" and (wait := throttling.intake_wait(request)):
        # The form comes back with what they typed, to send again once the hour is out.
        context = {"form": form, "wait_minutes": ceil(wait / 60)}
        return render(request, "portal/apply.html", context, status=429)
    if request.method == "POST" and form.is_valid():
        form.save()
        request.session["application"] = form.instance.pk
        made(request, reverse("applied"), "your application")
        return redirect("applied")  # so that a reload does not send the application again
    return render(request, "portal/apply.html", {"form": form}, status=400 if form.errors else 200)


def applied(request):
    """The thanks, to the browser that sent the application (its session remembers which)."""
    application = Application.objects.filter(pk=request.session.get("application")).first()
    if application is None:
        return redirect("apply")
    return render(request, "portal/applied.html", {"application": application})


class Login(auth_views.LoginView):
    """The login page, for partners and operators alike: an operator in no organisation, who has no jobs page,
    lands in the admin console unless they were on their way somewhere."""

    def get_default_redirect_url(self):
        user = self.request.user
        if user.is_staff and organisation_for(user) is None:
            return reverse("admin:index")
        return super().get_default_redirect_url()


@login_required
def account(request):
    """Who is logged in, their organisation and its members, and where to change the password or make tokens."""
    organisation = organisation_for(request.user)
    members = organisation.memberships.select_related("user").order_by("user__username") if organisation else []
    return render(request, "portal/account.html", {"members": members})


def locked_out(request, original_response: HttpResponse | None, credentials: dict | None) -> HttpResponse:
    """What a login refused by the lockout answers (axes calls it, for the partners' page and the admin's)."""
    context = {
        "username": (credentials or {}).get("username") or request.POST.get("username", ""),
        "minutes": settings.E31_LOGIN_LOCKOUT_MINUTES,
        "whole_address": getattr(request, "address_locked_out", False),
    }
    return render(request, "registration/locked_out.html", context, status=429)


class PasswordReset(auth_views.PasswordResetView):
    """Ask for a link to set a new password: so many asks an hour from one address, then 429 with the form as
    typed. A known address and an unknown one get the same answer, as fast: the control worker looks the
    address up and sends the email (portal.tasks), so the form tells nobody who has an account."""

    form_class = ResetForm
    template_name = "registration/password_reset_form.html"

    def post(self, request, *args, **kwargs):
        if wait := throttling.password_reset_wait(request):
            context = self.get_context_data(form=self.get_form(), wait_minutes=ceil(wait / 60))
            return self.render_to_response(context, status=429)
        return super().post(request, *args, **kwargs)

    def form_valid(self, form):
        with enqueue.unsent() as unsent:
            enqueue.send_on_commit("portal.tasks.send_password_reset", form.cleaned_data["email"], about="reset for")
        if unsent:
            form.add_error(None, f"{enqueue.UNREACHABLE}: no link could be sent. Please ask again in a minute.")
            return self.render_to_response(self.get_context_data(form=form), status=503)
        return redirect(self.get_success_url())

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "days": reset_days()}


def bad_request(request, exception) -> HttpResponse:
    """Django's 400 for a request it refuses before any view (a body past DATA_UPLOAD_MAX_MEMORY_SIZE, too many
    fields, a bad Host): in the API's JSON shape under /api/ (docs/api.md), the plain page elsewhere."""
    if not request.path.startswith("/api/"):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        limit = units.limit(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        message = f"The request body is over {limit}, more than the API reads; send data as an upload."
        return JsonResponse({"error": {"code": "too_large", "message": message}}, status=413)
    return JsonResponse({"error": {"code": "bad_request", "message": "The request cannot be read."}}, status=400)
