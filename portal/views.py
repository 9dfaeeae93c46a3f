"""The landing page and the design-partner program with its intake form."""

from django.shortcuts import redirect, render

from portal.forms import ApplicationForm


def landing(request):
    if request.user.is_authenticated and hasattr(request.user, "membership"):
        return redirect("jobs:list")
    return render(request, "portal/landing.html")


def design_partners(request):
    return render(request, "portal/design_partners.html")


def apply(request):
    form = ApplicationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        form.save()
        return render(request, "portal/applied.html", {"application": form.instance})
    return render(request, "portal/apply.html", {"form": form}, status=400 if form.errors else 200)
