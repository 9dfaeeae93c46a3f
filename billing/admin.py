from datetime import timedelta

from django import forms
from django.contrib import admin
from django.utils import timezone

from billing.models import LedgerEntry, RateCard, RetentionPolicy

# A card whose start the operator left at the form's "now" may be saved a little later; it starts then.
FORM_OPEN = timedelta(minutes=30)


class StartsNowOrLater(forms.ModelForm):
    """A form for what is priced or ruled from `effective_from` on: it starts now or later."""

    in_the_past = ""

    def clean_effective_from(self):
        starts, now = self.cleaned_data["effective_from"], timezone.now()
        if starts < now - FORM_OPEN:
            raise forms.ValidationError(self.in_the_past)
        return max(starts, now)


class RateCardForm(StartsNowOrLater):
    in_the_past = (
        "A rate card cannot start in the past: holds that have started are priced by the card in force "
        "when they started. Start it now or later."
    )

    class Meta:
        model = RateCard
        fields = ["rate_per_gpu_hour", "rate_per_staged_gb", "currency", "effective_from", "note"]


class RetentionPolicyForm(StartsNowOrLater):
    in_the_past = (
        "A retention policy cannot start in the past: jobs keep the days chosen under the policy in force "
        "when they were submitted. Start it now or later."
    )

    class Meta:
        model = RetentionPolicy
        fields = ["organisation", "max_staged_days", "output_days", "max_output_days", "effective_from", "note"]


class AppendOnlyInForce(admin.ModelAdmin):
    """Append-only once in force: a change is a new row from now or later, so nothing already priced
    or chosen under the old one changes. A row not yet in force can still be corrected or withdrawn."""

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and (obj is None or not _in_force(obj))

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (obj is None or not _in_force(obj))

    def get_actions(self, request):
        # The bulk delete asks no row whether it is in force.
        return {name: action for name, action in super().get_actions(request).items() if name != "delete_selected"}


def _in_force(row: RateCard | RetentionPolicy) -> bool:
    return row.effective_from <= timezone.now()


@admin.register(RateCard)
class RateCardAdmin(AppendOnlyInForce):
    """A new price is a new card: no hold already started, nor any ledger entry, changes price."""

    form = RateCardForm
    list_display = ["rate_per_gpu_hour", "rate_per_staged_gb", "currency", "effective_from", "note"]


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(AppendOnlyInForce):
    """The limits the job form and the CLI keep to. A job keeps the days chosen when it was submitted."""

    form = RetentionPolicyForm
    list_display = ["applies_to", "max_staged_days", "output_days", "max_output_days", "effective_from", "note"]
    list_filter = ["organisation"]

    def get_changeform_initial_data(self, request):
        """A new policy starts from the general one in force (or the settings'), to change what differs."""
        general = RetentionPolicy.in_force(None)
        fields = ("max_staged_days", "output_days", "max_output_days")
        return {**{name: getattr(general, name) for name in fields}, **super().get_changeform_initial_data(request)}

    @admin.display(description="For", ordering="organisation__name")
    def applies_to(self, policy: RetentionPolicy) -> str:
        return str(policy.organisation or "every organisation")


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    """Read-only: ledger rows are never changed or deleted, not even by operators."""

    list_display = ["job", "organisation", "kind", "gpus", "held", "seconds", "gpu_hours", "charged"]
    list_filter = ["organisation", "kind"]

    @admin.display(description="Held (UTC)", ordering="held_from")
    def held(self, entry: LedgerEntry) -> str:
        """To the second, as it is billed (the end's date only when it differs)."""
        end = "%H:%M:%S" if entry.held_to.date() == entry.held_from.date() else "%Y-%m-%d %H:%M:%S"
        return f"{entry.held_from:%Y-%m-%d %H:%M:%S} → {entry.held_to.strftime(end)}"

    @admin.display(description="Amount", ordering="amount")
    def charged(self, entry: LedgerEntry) -> str:
        return f"{entry.amount} {entry.currency}"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
