"""The E31 portal project: settings, URLs, the Celery app, organisations and the intake form."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
