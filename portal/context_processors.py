from functools import partial

from django.utils.functional import SimpleLazyObject

from portal.models import organisation_for


def portal(request) -> dict:
    """The signed-in partner's organisation, read from the database only by a page that shows it."""
    if not hasattr(request, "user"):
        return {"organisation": None}
    return {"organisation": SimpleLazyObject(partial(organisation_for, request.user))}
