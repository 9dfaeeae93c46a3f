"""What every page may show of the jobs app: the fleet, read from the database only by a page that shows it."""

from django.utils.functional import SimpleLazyObject

from jobs import scheduling


def fleet(request) -> dict:
    return {"fleet": SimpleLazyObject(scheduling.fleet)}
