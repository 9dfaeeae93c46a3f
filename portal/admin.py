from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.template.defaultfilters import pluralize

from portal import onboarding, text
from portal.forms import ApplicationForm as IntakeForm
from portal.models import Application, Membership, Organisation


def _send(request, application: Application, link: str) -> str:
    """Email the applicant their link, and tell the operator, with the link to send another way if need be."""
    days = round(settings.PASSWORD_RESET_TIMEOUT / 86400)
    url = request.build_absolute_uri(link)
    if not onboarding.send_link(application, url):
        return (
            f"Could not email {application.email}: send them this link to set a password and log in; it works once, "
            f"for {days} days: {url}"
        )
    if not settings.E31_EMAIL_HOST:
        return (
            f"No mail server is set (E31_EMAIL_HOST): the email to {application.email} was written to the portal's "
            f"output. Send them this link to set a password and log in; it works once, for {days} days: {url}"
        )
    return (
        f"Emailed {application.email} a link to set a password and log in; it works once, for {days} days. "
        f"Should the email not arrive, send them the link yourself: {url}"
    )


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class OrganisationForm(forms.ModelForm):
    """An organisation's name, as an operator types it, cleaned as a partner's names are."""

    class Meta:  # the admin names the model and its fields
        field_classes = {"name": text.NameField}


class ApplicationForm(forms.ModelForm):
    """An application, as an operator edits it, cleaned as the intake form cleans it. Its status is New or
    Declined here: only the Accept action accepts, since it makes the organisation and the account."""

    class Meta:  # the admin names the model and its fields
        field_classes = IntakeForm.Meta.field_classes

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "status" in self.fields:
            choices = Application.Status.choices
            self.fields["status"].choices = [(value, label) for value, label in choices if value != "accepted"]
            self.fields["status"].help_text = "To accept, use the Accept action of the applications list."


@admin.register(Organisation)
class OrganisationAdmin(admin.ModelAdmin):
    form = OrganisationForm
    list_display = ["name", "slug", "share_weight", "max_slots_held", "monthly_spend_cap", "created"]
    prepopulated_fields = {"slug": ["name"]}
    search_fields = ["name", "slug"]
    inlines = [MembershipInline]


@admin.register(Application)
class ApplicationAdmin(admin.ModelAdmin):
    form = ApplicationForm
    list_display = ["organisation", "applicant", "email", "hours", "status", "created"]
    list_filter = ["status"]
    search_fields = ["organisation", "name", "email"]
    readonly_fields = ["reviewed_by", "reviewed_at", "created"]
    actions = ["accept", "new_link", "decline"]
    change_form_template = "admin/portal/application/change_form.html"  # Accept, Decline, a new link

    def get_readonly_fields(self, request, application=None):
        """An accepted application stays accepted: its organisation and account exist."""
        if application is not None and application.status == Application.Status.ACCEPTED:
            return [*self.readonly_fields, "status"]
        return self.readonly_fields

    @admin.display(description="Applicant", ordering="name")
    def applicant(self, application: Application) -> str:
        return application.name

    @admin.display(description="GPU-hours", ordering="gpu_hours")
    def hours(self, application: Application) -> int | None:
        return application.gpu_hours

    def has_accept_permission(self, request) -> bool:
        """Accepting creates an account: it takes the right to add users as well."""
        return self.has_change_permission(request) and request.user.has_perm("auth.add_user")

    @admin.action(
        description="Accept the selected applications (an organisation and an account for each)",
        permissions=["accept"],
    )
    def accept(self, request, queryset):
        for application in queryset:
            try:
                membership, link = onboarding.accept(application, request.user)
            except onboarding.AcceptError as error:
                messages.error(request, f"{application} was not accepted: {error}")
                continue
            organisation = membership.organisation
            messages.success(
                request,
                f"Accepted {application.name}: organisation {organisation.name} ({organisation.slug}) and the account "
                f"{membership.user.username}. {_send(request, application, link)}",
            )

    @admin.action(description="A new set-password link for the accepted applicants", permissions=["accept"])
    def new_link(self, request, queryset):
        for application in queryset:
            try:
                messages.success(request, _send(request, application, onboarding.new_link(application)))
            except onboarding.AcceptError as error:
                messages.error(request, f"{application}: no new link, {error}")

    @admin.action(description="Decline the selected applications", permissions=["change"])
    def decline(self, request, queryset):
        for application in queryset:
            application.review(Application.Status.DECLINED, request.user)
        declined = queryset.count()
        messages.success(request, f"Declined {declined} application{pluralize(declined)}.")
