from portal.models import organisation_for


def portal(request) -> dict:
    return {"organisation": organisation_for(request.user) if hasattr(request, "user") else None}
