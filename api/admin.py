"""API tokens in the operators' console: seen (never their secret, which is not stored) and revoked. knox's own
token model is swapped out for api.ApiToken, so the admin leaves it out by itself."""

from django.contrib import admin

from api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "token_key", "user", "created", "last_used_at", "expiry")
    list_select_related = ("user",)
    search_fields = ("name", "token_key", "user__username")
    readonly_fields = ("name", "token_key", "user", "created", "last_used_at", "expiry")
    exclude = ("digest",)

    def has_add_permission(self, request) -> bool:
        return False  # a token is made by its owner, on the API tokens page, where it is shown once

    def has_change_permission(self, request, obj=None) -> bool:
        return False
