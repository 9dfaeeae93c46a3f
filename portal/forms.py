"""The design-partner intake form: what an applicant types, cleaned of invisible characters."""

from django import forms

from portal import text
from portal.models import Application

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
