from django import forms

from portal.models import Application


class ApplicationForm(forms.ModelForm):
    class Meta:
        model = Application
        fields = ["name", "email", "organisation", "dataset", "work", "gpu_hours"]
        widgets = {"dataset": forms.Textarea(attrs={"rows": 3}), "work": forms.Textarea(attrs={"rows": 3})}
