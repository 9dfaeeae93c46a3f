"""Accepting an application: a new organisation, an account for the applicant in it, and a link to
set their password, emailed to them (written to the process's output where no mail server is set) and shown
to the operator (who can send it another way).

The organisation's slug names its folders: `<root>/<slug>/` under each staging root and `<slug>/`
in the operator's buckets. A new organisation never gets a slug whose folders exist already (set up
for someone, or left by an organisation deleted since): its members would read what is there."""

import logging
import smtplib

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.utils.text import slugify

from jobs.staging import s3
from portal.models import Application, Membership, Organisation

log = logging.getLogger(__name__)


class AcceptError(ValueError):
    """The application cannot be accepted this way; the message says what the operator can do."""


def accept(application: Application, by) -> tuple[Membership, str]:
    """The applicant's organisation and account (no password yet), the application marked accepted;
    returns the membership and the path where the applicant sets a password: it works once, for
    PASSWORD_RESET_TIMEOUT (three days by default).

    Never into an organisation that exists already: a name is no proof of belonging to it."""
    email = application.email.strip().lower()
    user_model = get_user_model()
    if len(email) > user_model._meta.get_field("username").max_length:
        raise AcceptError(f"{email} is too long for a user name; create the account by hand.")
    with transaction.atomic():
        application = Application.objects.select_for_update().get(pk=application.pk)  # one operator at a time
        if application.status != Application.Status.NEW:
            raise AcceptError(f"it was {application.get_status_display().lower()} already.")
        if Organisation.objects.filter(name__iexact=application.organisation.strip()).exists():
            raise AcceptError(
                f"an organisation named {application.organisation} exists already; if {application.name} belongs "
                "to it, add an account to it by hand."
            )
        if user_model.objects.filter(Q(username__iexact=email) | Q(email__iexact=email)).exists():
            raise AcceptError(f"{email} has an account already; add it to an organisation by hand.")
        organisation = Organisation.objects.create(name=application.organisation.strip(), slug=_free_slug(application))
        user = user_model(username=email, email=email, first_name=application.name[:150])
        user.set_unusable_password()
        user.save()
        membership = Membership.objects.create(user=user, organisation=organisation)
        application.review(Application.Status.ACCEPTED, by)
    return membership, _link(user)


def _free_slug(application: Application) -> str:
    base = slugify(application.organisation)[:50] or "organisation"
    slug, n = base, 1
    while _taken(slug):
        n += 1
        slug = f"{base}-{n}"
    return slug


def _taken(slug: str) -> bool:
    if Organisation.objects.filter(slug=slug).exists():
        return True
    if any((root / slug).exists() for root in settings.E31_STAGING_ROOTS):
        return True
    from jobs.staging import s3_reads  # noqa: PLC0415 (boto3: loaded where S3 is read)

    try:
        return s3_reads.prefix_in_use(slug)
    except s3.S3Error as error:
        raise AcceptError(f"its folders could not be checked: {error} Try again.") from None


def new_link(application: Application) -> str:
    """A fresh set-password link for an accepted applicant who has not set one (the first unused,
    or too old)."""
    user = get_user_model().objects.filter(username=application.email.strip().lower()).first()
    if application.status != Application.Status.ACCEPTED or user is None:
        raise AcceptError("it has no account from its acceptance.")
    if user.has_usable_password():
        raise AcceptError(f"{user.username} has set a password; they can change it once logged in.")
    return _link(user)


def _link(user) -> str:
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return reverse("password_reset_confirm", kwargs={"uidb64": uid, "token": default_token_generator.make_token(user)})


def send_link(application: Application, url: str) -> bool:
    """Email the applicant their set-password link: through the mail server, or where none is set written to
    the process's output, as every email then is (the console backend: standard output, never the log files).
    False when it could not be sent (logged)."""
    days = round(settings.PASSWORD_RESET_TIMEOUT / 86400)
    body = render_to_string("portal/email/set_password.txt", {"application": application, "url": url, "days": days})
    try:
        send_mail("Your E31 account: set a password", body, None, [application.email])
    except (OSError, smtplib.SMTPException) as error:
        log.warning("the set-password link for %s was not emailed: %s", application.email, error)
        return False
    return True
