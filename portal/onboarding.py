"""Accepting an application: a new organisation, an account for the applicant in it, and a link the
operator sends them to set their password (the portal sends no email)."""

from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.utils.text import slugify

from portal.models import Application, Membership, Organisation


class AcceptError(ValueError):
    """The application cannot be accepted this way; the message says what the operator can do."""


def accept(application: Application, by) -> tuple[Membership, str]:
    """The applicant's organisation and account (no password yet), the application marked accepted;
    returns the membership and the path where the applicant sets a password: it works once, for
    PASSWORD_RESET_TIMEOUT (three days by default).

    Never into an organisation that exists already: a name is no proof of belonging to it."""
    email = application.email.strip().lower()
    user_model = get_user_model()
    with transaction.atomic():
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
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return membership, reverse("password_reset_confirm", kwargs={"uidb64": uid, "token": token})


def _free_slug(application: Application) -> str:
    base = slugify(application.organisation)[:50] or "organisation"
    slug, n = base, 1
    while Organisation.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug
