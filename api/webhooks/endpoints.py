"""Making an endpoint: its URL through the SSRF guard, its secret made here and shown once. An organisation's
hears all its jobs; a job's own is made just after the job, and hears what the job went through meanwhile."""

from django.conf import settings

from api.errors import invalid
from api.webhooks.models import Endpoint, new_secret
from api.webhooks.receivers import catch_up
from jobs.models import Job
from jobs.staging import fetch
from portal.models import Organisation

MAX_URL = 2000


def check_target(field: str, url: str) -> str:
    """A webhook's URL, as given, once it passes the SSRF guard: http(s), no credentials, a public host (or
    one in E31_STAGING_ALLOWED_HOSTS). 400 naming `field` otherwise."""
    if len(url) > MAX_URL:
        raise invalid(field, f"A webhook URL is at most {MAX_URL} characters long.")
    try:
        fetch.check_url(url, settings.E31_STAGING_ALLOWED_HOSTS)
    except fetch.FetchError as error:
        raise invalid(field, f"Webhooks cannot go to {url}: {error}") from None
    return url


def make(organisation: Organisation, url: str, user, job: Job | None = None) -> tuple[Endpoint, str]:
    """A checked URL's endpoint, and its secret (shown once: only its sealed form is kept)."""
    secret = new_secret()
    endpoint = Endpoint(organisation=organisation, job=job, url=url, created_by=user)
    endpoint.secret = secret
    endpoint.save()
    if job is not None:
        catch_up(endpoint)
    return endpoint, secret
