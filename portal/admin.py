from django.contrib import admin, messages

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
    list_display = ["organisation", "name", "email", "gpu_hours", "status", "created"]
    list_filter = ["status"]
    search_fields = ["organisation", "name", "email"]
    readonly_fields = ["reviewed_by", "reviewed_at", "created"]
    actions = ["accept", "decline"]

    @admin.action(description="Accept the selected applications", permissions=["change"])
    def accept(self, request, queryset):
        for application in queryset:
            application.review(Application.Status.ACCEPTED, request.user)
        messages.success(request, f"Accepted {queryset.count()} application(s).")

    @admin.action(description="Decline the selected applications", permissions=["change"])
    def decline(self, request, queryset):
        for application in queryset:
            application.review(Application.Status.DECLINED, request.user)
        messages.success(request, f"Declined {queryset.count()} application(s).")
