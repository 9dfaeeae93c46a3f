"""The "API tokens" page (/account/tokens/): a signed-in partner makes a token (a name, an optional expiry),
sees it once, lists theirs with their last use, and revokes one. Server-rendered, a plain form each."""

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from api.models import ApiToken
from portal.models import organisation_for
from portal.sent_once import made, sent_once
from portal.text import CountField, NameField

MAX_EXPIRY_DAYS = 365


class TokenForm(forms.Form):
    name = NameField(max_length=100, help_text="What it is for, to know it again: a laptop, a CI job.")
    expiry_days = CountField(
        label="Expires after (days)",
        required=False,
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        help_text=f"1 to {MAX_EXPIRY_DAYS}; leave empty for a token that lasts until you revoke it.",
    )

    def create(self, user) -> str:
        """The new token, in full: the only time it exists outside its owner's hands."""
        days = self.cleaned_data["expiry_days"]
        _, token = ApiToken.objects.create(
            user, expiry=timedelta(days=days) if days else None, name=self.cleaned_data["name"]
        )
        return token


@never_cache
@login_required
@sent_once("token")
def tokens(request):
    """The list and the form; a valid post answers the page with the new token on it, once (never stored, never
    cached: the response is all there is of it)."""
    if organisation_for(request.user) is None:
        return render(request, "jobs/no_organisation.html", status=403)
    form = TokenForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        created = form.create(request.user)
        made(request, reverse("api_tokens"), f"the token “{form.cleaned_data['name']}”, shown once when it was made")
        form = TokenForm()
    context = {"form": form, "created": created, "tokens": ApiToken.objects.filter(user=request.user)}
    return render(request, "api/tokens.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def revoke(request):
    """Delete one of the user's own tokens: the next request with it is 401. Another's is 404."""
    token = get_object_or_404(ApiToken, user=request.user, digest=request.POST.get("token", ""))
    token.delete()
    messages.success(request, f"The token “{token.name}” is revoked: requests with it are refused from now on.")
    return redirect("api_tokens")
