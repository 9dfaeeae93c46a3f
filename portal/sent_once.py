"""A form that makes something (a job, a pass, a token, an application) carries a one-time token, its field
`once` ({% once_field %}), under portal.idempotency's rules. The same form posted again (a double-click, a
reload, Back then Submit) lands on what the first post made, with a note saying so; the token with fields
that changed (Back, an edit, Submit) makes nothing and offers the form's values again as a new one."""

import re
import uuid
from functools import wraps

from django.contrib import messages
from django.shortcuts import redirect, render

from portal import idempotency
from portal.idempotency import Found

FIELD = "once"
_TOKEN = re.compile(r"[0-9a-f]{32}")
_NOT_ASKED = {FIELD, "csrfmiddlewaretoken"}


def new_token() -> str:
    return uuid.uuid4().hex


def token_for(request) -> str:
    """The token a form is drawn with: the one it was posted with when it comes back with errors (its claim was
    freed), else a new one."""
    posted = request.POST.get(FIELD, "") if request.method == "POST" else ""
    return posted if _TOKEN.fullmatch(posted) else new_token()


def sent_once(noun: str):
    """For a view whose POST makes a `noun`: the view calls made() with where it is once it is made."""

    def decorate(view):
        @wraps(view)
        def once(request, *args, **kwargs):
            token = request.POST.get(FIELD, "") if request.method == "POST" else ""
            if not _TOKEN.fullmatch(token):  # a post from no page of ours (a script): as it always was
                return view(request, *args, **kwargs)
            claim = idempotency.claim(_owner(request), f"form:{token}", _fingerprint(request))
            if claim.found is Found.NEW:
                return _made_once(claim, view, request, *args, **kwargs)
            if claim.found is Found.ANSWERED:
                kept = claim.answer
                messages.info(request, f"This form was sent already: it made {kept['what']}, shown here.")
                return redirect(kept["location"])
            return _sent_before(request, claim, noun)

        return once

    return decorate


def made(request, location: str, what: str) -> None:
    """Say what the post made and where it is: a second post of the form lands there."""
    claim = getattr(request, "_once_claim", None)
    if claim is not None:
        idempotency.answer(claim, {"location": location, "what": what})
        request._once_answered = True


def _made_once(claim, view, request, *args, **kwargs):
    """The view's answer; the token freed when it made nothing (the form came back with errors), so the same
    page can be sent again once they are fixed."""
    request._once_claim = claim
    response = view(request, *args, **kwargs)
    if not getattr(request, "_once_answered", False):
        idempotency.release(claim)
    return response


def _sent_before(request, claim, noun: str):
    """The token came with other fields, or while its first post is still being answered: nothing is made, and
    the values sent are offered again as a new post (files cannot be: they are chosen again)."""
    kept = claim.answer if claim.row.answer else None
    fields = [(name, value) for name, values in request.POST.lists() if name not in _NOT_ASKED for value in values]
    context = {
        "noun": noun,
        "kept": kept,
        "in_flight": claim.found is Found.IN_FLIGHT,
        "fields": fields,
        "had_files": bool(request.FILES),
        "token": new_token(),
    }
    return render(request, "portal/sent_before.html", context, status=409)


def _owner(request) -> str:
    return f"user:{request.user.pk}" if request.user.is_authenticated else "visitor"


def _fingerprint(request) -> str:
    asked = sorted((name, values) for name, values in request.POST.lists() if name not in _NOT_ASKED)
    files = sorted((name, upload.name, upload.size) for name, upload in request.FILES.items())
    return idempotency.fingerprint(request.path, repr(asked), repr(files))
