from django.contrib import admin

from billing.models import LedgerEntry, RateCard


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
    list_display = ["rate_per_gpu_hour", "currency", "effective_from", "note"]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    """Read-only: ledger rows are never changed or deleted, not even by operators."""

    list_display = ["job", "organisation", "kind", "gpus", "held_from", "held_to", "seconds", "gpu_hours", "amount"]
    list_filter = ["organisation", "kind"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
