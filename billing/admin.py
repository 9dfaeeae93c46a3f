"""The operators' console for billing: rate cards and retention policies (append-only once in
force), the ledger read-only, and corrections recorded as entries of their own."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Exists, OuterRef
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html

from billing.metering import record_correction
from billing.models import LedgerEntry, RateCard, RetentionPolicy
from jobs.models import Allocation, Gpu, Job
from portal import units

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


class CorrectionForm(forms.Form):
    """A correction of what a job was charged: signed, in one of the currencies it was charged in, and why."""

    job = forms.IntegerField(min_value=1, help_text="The number of the job whose charges this corrects.")
    amount = forms.DecimalField(
        max_digits=14, decimal_places=4, help_text="Negative for a credit (a refund); positive for a charge missed."
    )
    currency = forms.CharField(min_length=3, max_length=3, initial="USD")
    reason = forms.CharField(
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Shown to the partner, on the ledger and receipt.",
    )

    def clean_job(self) -> Job:
        job = Job.objects.filter(pk=self.cleaned_data["job"]).select_related("organisation").first()
        if job is None:
            raise forms.ValidationError(f"There is no job #{self.cleaned_data['job']}.")
        return job


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    """Read-only: ledger entries are never changed or deleted, not even by operators. A correction is a
    new entry, recorded on its own page."""

    list_display = ["job", "organisation", "what", "gpus", "held", "seconds", "gpu_hours", "charged", "reason", "entry"]
    list_filter = ["organisation", "kind"]
    search_fields = ["=job__id", "hash"]
    change_list_template = "admin/billing/ledgerentry/change_list.html"

    def get_queryset(self, request):
        """Each entry with whether its job held a GPU, in the same query: a hold of CPU slots says so."""
        gpus = Allocation.objects.filter(job=OuterRef("job_id")).exclude(gpu__kind=Gpu.Kind.CPU)
        return super().get_queryset(request).select_related("job", "organisation").annotate(held_a_gpu=Exists(gpus))

    @admin.display(description="Kind", ordering="kind")
    def what(self, entry: LedgerEntry) -> str:
        if entry.kind == LedgerEntry.Kind.HOLD:
            return "GPU hold" if entry.held_a_gpu else "CPU slot hold"
        return entry.get_kind_display()

    @admin.display(description="Held (UTC)", ordering="held_from")
    def held(self, entry: LedgerEntry) -> str:
        """To the second, as it is billed (the end's date only when it differs)."""
        end = "%H:%M:%S" if entry.held_to.date() == entry.held_from.date() else "%Y-%m-%d %H:%M:%S"
        return f"{entry.held_from:%Y-%m-%d %H:%M:%S} → {entry.held_to.strftime(end)}"

    @admin.display(description="Amount", ordering="amount")
    def charged(self, entry: LedgerEntry) -> str:
        return units.money(entry.amount, entry.currency)

    @admin.display(description="Entry (sha256)")
    def entry(self, entry: LedgerEntry) -> str:
        return format_html('<code title="{}">{}…</code>', entry.hash, entry.short_hash)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_correct_permission(self, request) -> bool:
        """Operators allowed to add ledger entries: the only entry they add is a correction."""
        return request.user.has_perm("billing.add_ledgerentry")

    def get_urls(self):
        correct = path("correct/", self.admin_site.admin_view(self.correct_view), name="billing_ledgerentry_correct")
        return [correct, *super().get_urls()]

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(
            request, {"can_correct": self.has_correct_permission(request), **(extra_context or {})}
        )

    def correct_view(self, request):
        """A correction's page: the job (given by ?job= from its page), the signed amount, its currency
        and why; then a new ledger entry, or the form again with what was wrong."""
        if not self.has_correct_permission(request):
            raise PermissionDenied
        form = CorrectionForm(request.POST or None, initial={"job": request.GET.get("job")})
        if form.is_valid():
            try:
                entry = record_correction(by=request.user, **form.cleaned_data)
            except ValidationError as error:
                form.add_error(None, error)
            else:
                self.log_addition(request, entry, f"Correction of job #{entry.job_id}: {entry.reason}")
                recorded = units.money(entry.amount, entry.currency)
                messages.success(request, f"Job #{entry.job_id}: {recorded} recorded, entry {entry.short_hash}.")
                return redirect("admin:billing_ledgerentry_changelist")
        context = {
            **self.admin_site.each_context(request),
            "title": "Record a correction",
            "opts": self.model._meta,
            "form": form,
        }
        return TemplateResponse(request, "admin/billing/ledgerentry/correct.html", context)
