from django.conf import settings
from django.contrib import admin, messages

from portal import onboarding
from portal.models import Application, Membership, Organisation


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Organisation)
class OrganisationAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created"]
    prepopulated_fields = {"slug": ["name"]}
    search_fields = ["name", "slug"]
    inlines = [MembershipInline]


@admin.register(Application)
class ApplicationAdmin(admin.ModelAdmin):
    list_display = ["organisation", "applicant", "email", "gpu_hours", "status", "created"]
    list_filter = ["status"]
    search_fields = ["organisation", "name", "email"]
    readonly_fields = ["reviewed_by", "reviewed_at", "created"]
    actions = ["accept", "decline"]

    @admin.display(description="Applicant", ordering="name")
    def applicant(self, application: Application) -> str:
        return application.name

    @admin.action(
        description="Accept the selected applications (an organisation and an account for each)",
        permissions=["change"],
    )
    def accept(self, request, queryset):
        days = round(settings.PASSWORD_RESET_TIMEOUT / 86400)
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
                f"{membership.user.username}. Send {application.email} this link to set a password and log in; it "
                f"works once, for {days} days: {request.build_absolute_uri(link)}",
            )

    @admin.action(description="Decline the selected applications", permissions=["change"])
    def decline(self, request, queryset):
        for application in queryset:
            application.review(Application.Status.DECLINED, request.user)
        messages.success(request, f"Declined {queryset.count()} application(s).")
