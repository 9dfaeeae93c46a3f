"""The design-partner intake form and the password reset's, what people type cleaned of invisible characters."""

import logging
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import PasswordResetForm

from portal import text
from portal.models import Application

log = logging.getLogger(__name__)

MOST_GPU_HOURS = 1_000_000


class ApplicationForm(forms.ModelForm):
    class Meta:
        model = Application
        fields = ["name", "email", "organisation", "dataset", "work", "gpu_hours"]
        field_classes = {
            "name": text.NameField,
            "email": text.EmailField,
            "organisation": text.NameField,
            "dataset": text.TextField,
            "work": text.TextField,
        }
        widgets = {"dataset": forms.Textarea(attrs={"rows": 3}), "work": forms.Textarea(attrs={"rows": 3})}

    gpu_hours = text.CountField(
        label="GPU-hours you expect",
        required=False,
        min_value=1,
        max_value=MOST_GPU_HOURS,
        error_messages={"max_value": f"We plan passes of up to {MOST_GPU_HOURS:,} GPU-hours; say more under work."},
    )


class ResetForm(PasswordResetForm):
    """Django's password reset, with the portal's address in its link and no link where it would be logged.
    The page only checks the address; the control worker sends the links (`send_links`), so a known address
    is answered as fast as an unknown one and a slow mail server holds up no page."""

    subject_template_name = "portal/email/password_reset_subject.txt"
    email_template_name = "portal/email/password_reset.txt"

    email = text.EmailField(label="Email", max_length=254, widget=forms.EmailInput(attrs={"autocomplete": "email"}))

    def get_users(self, email):
        """Accounts with this address, those that never set a password too: an accepted applicant who lost the
        first link sets one this way."""
        users = get_user_model()._default_manager.filter(email__iexact=email, is_active=True)
        return (user for user in users if user.email.casefold() == email.casefold())

    def send_links(self) -> None:
        """Email each active account with the address a link, which leads to E31_PUBLIC_URL."""
        self.save(
            domain_override=urlsplit(settings.E31_PUBLIC_URL).netloc,
            subject_template_name=self.subject_template_name,
            email_template_name=self.email_template_name,
            extra_email_context={"public_url": settings.E31_PUBLIC_URL, "days": reset_days()},
        )

    def send_mail(self, subject_template_name, email_template_name, context, from_email, to_email, **kwargs):
        if not settings.E31_EMAIL_HOST:
            # Without a mail server an email goes to the process's output, where a working link is anyone's
            # who reads the logs: the operator is told who asked instead, and sets the password.
            user = context["user"].get_username()
            log.warning(
                "%s asked for a password reset; with no mail server (E31_EMAIL_HOST) no link is sent. Give them "
                "a password with `manage.py changepassword %s` (or in the admin console) if they asked you.",
                user,
                user,
            )
            return
        super().send_mail(subject_template_name, email_template_name, context, from_email, to_email, **kwargs)


def reset_days() -> int:
    """For how many days a link to set a password works."""
    return round(settings.PASSWORD_RESET_TIMEOUT / 86400)
