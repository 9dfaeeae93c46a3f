from functools import partial

from django.conf import settings
from django.utils.functional import SimpleLazyObject

from portal.models import organisation_for


def portal(request) -> dict:
    """The signed-in partner's organisation, read from the database only by a page that shows it; whether emails
    are sent (a mail server is set) or only written to the process's output."""
    mails = bool(settings.E31_EMAIL_HOST)
    if not hasattr(request, "user"):
        return {"organisation": None, "mails": mails}
    return {"organisation": SimpleLazyObject(partial(organisation_for, request.user)), "mails": mails}
