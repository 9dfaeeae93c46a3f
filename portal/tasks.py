"""The portal's Celery tasks, sent by name (portal.views.PasswordReset, beat): nothing imports this module."""

from celery import shared_task

from portal import idempotency
from portal.forms import ResetForm


@shared_task
def send_password_reset(email: str) -> bool:
    """The links asked for on the password reset page, to the accounts with this address (none, for an
    address nobody has: the page answered the same)."""
    form = ResetForm({"email": email})
    if not form.is_valid():
        return False
    form.send_links()
    return True


@shared_task
def purge_request_keys() -> int:
    """Forget the idempotency keys and form tokens older than a day."""
    return idempotency.purge()
