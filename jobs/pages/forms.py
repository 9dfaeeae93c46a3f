"""The job form: work, data, request and retention, as typed. The values the service checks (the work kind and
its parameters, the data, GPUs, hours, shape, deadline, the days kept) go to it as they are, and its
sentences are shown under their fields: a Django field would refuse them first, in its own words."""

from collections.abc import Iterable
from dataclasses import replace

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.template.defaultfilters import pluralize

from billing.models import RetentionPolicy
from jobs import processors
from jobs.models import Job
from jobs.spec import Data, JobSpec, NamedFile, Request, Retention, Work
from portal.text import NameField


def param_field_name(processor: processors.Processor, param: processors.Param) -> str:
    return f"param-{processor.name}-{param.name}"


def as_typed(label: str, attrs: dict | None = None, **options) -> forms.CharField:
    """A number field whose text goes to the service as typed, for the service to read and refuse."""
    return forms.CharField(label=label, widget=forms.NumberInput(attrs=attrs), **options)


class RequestForm(forms.Form):
    """GPUs × hours, what becomes of the staged copy, and whether a partial output will do: the part
    of the job form that the full pass of a sample asks again (pre-filled from the sample's estimate)."""

    gpus = as_typed("GPUs", {"min": 1}, initial=2)
    hours = as_typed("Hours", {"min": "0.01", "step": "0.01"}, initial=1)
    deadline = forms.CharField(
        label="Deadline (UTC, optional)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text=(
            "Done by then: the hold ends at the deadline at the latest, and a job that has not started by "
            "then ends without holding anything."
        ),
    )
    request_kind = forms.CharField(
        label="Request",
        required=False,
        initial=Job.Request.FLEXIBLE,
        widget=forms.RadioSelect(choices=Job.Request.choices),
    )
    max_gpus = as_typed("Width cap (optional)", {"min": 1}, required=False)
    retention = forms.ChoiceField(
        label="After the job, the staged copy of the data is",
        choices=[("delete", "deleted when the job ends"), ("keep", "kept for")],
        initial="delete",
        widget=forms.RadioSelect,
    )
    allow_partial = forms.BooleanField(
        label="Allow partial output",
        required=False,
        help_text=(
            "If a shard still fails after its retries, finish without it: its records are listed in the "
            "rejects. Otherwise the job fails."
        ),
    )
    keep_days = as_typed("days", {"min": 1}, initial=7, required=False)
    output_days = as_typed("The job's output is", {"min": 1}, required=False)  # blank: the default

    def __init__(self, *args, policy: RetentionPolicy, **kwargs):
        """`policy`: the retention policy in force for the organisation, whose limits the days keep to."""
        super().__init__(*args, **kwargs)
        self.policy = policy
        self.fields["hours"].widget.attrs["max"] = settings.E31_MAX_HOURS
        self.fields["output_days"].widget.attrs["max"] = policy.max_output_days
        self.fields["output_days"].initial = policy.output_days
        if policy.max_staged_days:
            self.fields["keep_days"].widget.attrs["max"] = policy.max_staged_days
            self.fields["keep_days"].initial = min(self.fields["keep_days"].initial, policy.max_staged_days)
        else:  # the policy keeps no staged copy: nothing to choose
            self.fields["retention"].choices = [("delete", "deleted when the job ends (the retention policy)")]
            self.fields["retention"].error_messages["invalid_choice"] = (
                "The retention policy keeps no staged copy: it is deleted when the job ends."
            )

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("retention") == "keep" and not cleaned.get("keep_days"):
            self.add_error("keep_days", "Say how many days to keep the staged copy.")
        return cleaned

    def request(self) -> Request:
        """The request asked for; this form asks no shape, so a sample's pass runs short-wide."""
        cleaned = self.cleaned_data
        return Request(
            cleaned["gpus"],
            cleaned["hours"],
            deadline=cleaned["deadline"],
            allow_partial=cleaned["allow_partial"],
            kind=cleaned["request_kind"],
            max_gpus=cleaned["max_gpus"],
        )

    def kept_for(self) -> Retention:
        """How long the staged copy and the output are kept (the `retention` field: delete or keep)."""
        cleaned = self.cleaned_data
        staged_days = cleaned["keep_days"] if cleaned["retention"] == "keep" else 0
        return Retention(staged_days, output_days=cleaned["output_days"] or None)

    def field_for(self, error_field: str) -> str | None:
        """The form field a refusal of the service's belongs to: the part of the form it names, if shown here."""
        error_field = {"request": "request_kind"}.get(error_field, error_field)
        return error_field if error_field in self.fields else None


class JobForm(RequestForm):
    data = forms.FileField(
        label="Dataset",
        required=False,
        allow_empty_file=True,  # the staging check says why an empty file is no dataset
        help_text=(
            "A CSV file with a header row, JSONL (one JSON object per line), Parquet, or a .zip or .tar of images."
        ),
    )
    upload = forms.UUIDField(required=False, widget=forms.HiddenInput)
    model = forms.FileField(
        label="Model file",
        required=False,
        help_text="The model the work runs: checked when you submit (it must load), kept with the staged copy.",
    )
    model_location = forms.CharField(  # used as typed, as the data's location is
        label="or the model's URL, s3:// URI or server path",
        required=False,
        max_length=2000,
        help_text=(
            "An http(s) URL or s3:// URI (a prefix ending in / is the model folder) the portal fetches when you "
            "submit, or a file in your staging folder."
        ),
    )
    model_from_job = forms.TypedChoiceField(
        label="or the model of an earlier job",
        required=False,
        coerce=int,
        empty_value=None,
        help_text="A model is kept while its job keeps its staged copy.",
    )
    sha256 = NameField(
        label="SHA-256 of the data (optional)",
        required=False,
        max_length=100,
        help_text="Staging checks the data against it and fails the job if they differ.",
    )
    location = forms.CharField(  # used as typed: submit refuses one with invisible characters, never cleans it
        label="or a URL, s3:// URI or server path",
        required=False,
        max_length=4_000_000,  # many parts' locations, one a line: the service holds each to 2,000 characters
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "autocapitalize": "off"}),
        help_text=(
            "An http(s) URL the portal downloads, an s3://bucket/key, "
            "or a file in your organisation's staging folder on the server. "
            "Several, one a line, are one dataset: its parts, joined in that order."
        ),
    )
    s3_access_key_id = NameField(label="S3 access key ID", required=False, max_length=128)
    s3_secret_access_key = forms.CharField(
        label="S3 secret access key", required=False, max_length=256, widget=forms.PasswordInput
    )
    s3_region = NameField(label="S3 region", required=False, max_length=40, help_text="e.g. eu-west-1")
    model_s3_access_key_id = NameField(label="S3 access key ID", required=False, max_length=128)
    model_s3_secret_access_key = forms.CharField(
        label="S3 secret access key", required=False, max_length=256, widget=forms.PasswordInput
    )
    model_s3_region = NameField(label="S3 region", required=False, max_length=40, help_text="e.g. eu-west-1")
    work = forms.CharField(label="Work", widget=forms.RadioSelect)
    shape = forms.CharField(
        label="Shape", initial=Job.Shape.SHORT_WIDE, widget=forms.RadioSelect(choices=Job.Shape.choices)
    )
    sample = forms.BooleanField(
        label="Run a sample first",
        required=False,
        help_text=(
            "Stage the data and run the work on one slot for about a minute, then see the GPU-hours, time and "
            "cost of the full pass in each shape before asking for it. The sample is billed like any job."
        ),
    )

    def __init__(self, *args, kept_models: Iterable[Job] = (), **kwargs):
        """`kept_models`: the organisation's jobs whose model can be chosen again."""
        super().__init__(*args, **kwargs)
        self.fields["model_from_job"].choices = [("", "none")] + [
            (job.pk, f"{job.model_name}, from job {job.pk} ({job.work})") for job in kept_models
        ]
        if keep := self.policy.sample_keep_days:
            self.fields["sample"].help_text += (
                f" Its staged copy is kept at least {keep} day{pluralize(keep)}, whatever you choose below, so "
                "that the full pass takes it over rather than staging the data again."
            )
        else:
            self.fields[
                "sample"
            ].help_text += " The retention policy keeps no staged copy, so the full pass stages the data again."
        if not settings.E31_STAGING_ROOTS:  # no server paths here: not offered
            self.fields["location"].label = "or a URL or s3:// URI"
            self.fields["location"].help_text = "An http(s) URL the portal downloads, or an s3://bucket/key."
            self.fields["model_location"].label = "or the model's URL or s3:// URI"
            self.fields["model_location"].help_text = (
                "An http(s) URL or s3:// URI (a prefix ending in / is the model folder) the portal fetches when you "
                "submit."
            )
        kinds = processors.available()
        self.fields["work"].widget.choices = [(p.name, f"{p.name}: {p.description}") for p in kinds]
        self.fields["work"].initial = "clean-table" if any(p.name == "clean-table" for p in kinds) else None
        for processor in kinds:
            for param in processor.params:
                self.fields[param_field_name(processor, param)] = NameField(
                    label=param.label,
                    required=False,
                    initial=param.default,
                    help_text=f"{param.help} ({param.name} in the API and the e31 client)",
                )

    def field_for(self, error_field: str) -> str | None:
        """The form field a refusal of the service's belongs to: a work parameter's own field, else the part of
        the form it names."""
        if error_field.startswith("params."):
            processor, name = self._processor(), error_field.removeprefix("params.")
            named = [param for param in processor.params if param.name == name] if processor else []
            return param_field_name(processor, named[0]) if named else "work"
        if error_field == "data" and self.cleaned_data.get("location"):
            return "location"
        if error_field == "model_s3_credentials":
            return "model_s3_access_key_id"
        if error_field == "model":
            given = [name for name in ("model_location", "model_from_job") if self.cleaned_data.get(name)]
            return given[0] if len(given) == 1 else "model"
        return super().field_for(error_field)

    def model_fields(self):
        return [self["model"], self["model_location"], self["model_from_job"]]

    def model_kinds(self) -> str:
        """The work kinds that take a model, for the page to show the model's fields with them."""
        return " ".join(processor.name for processor in processors.available() if processor.model_file)

    def param_groups(self):
        """(processor, bound fields) for each work kind, so the template can show its parameters."""
        return [
            (processor, [self[param_field_name(processor, param)] for param in processor.params])
            for processor in processors.available()
        ]

    def s3_fields(self, prefix: str = ""):
        return [self[f"{prefix}s3_{name}"] for name in ("access_key_id", "secret_access_key", "region")]

    def model_s3_fields(self):
        return self.s3_fields("model_")

    def s3_credentials(self, prefix: str = "") -> dict | None:
        """The credentials for an s3:// location (the model's, with prefix "model_"), if the partner gave
        any; kept only until the data is staged, or the model fetched."""
        given = {
            name: self.cleaned_data[f"{prefix}s3_{name}"].strip()
            for name in ("access_key_id", "secret_access_key", "region")
            if self.cleaned_data.get(f"{prefix}s3_{name}", "").strip()
        }
        return given or None

    def _processor(self) -> processors.Processor | None:
        """The work kind chosen, if there is one of that name (the service says so when there is not)."""
        chosen = self.cleaned_data.get("work")
        return next((processor for processor in processors.available() if processor.name == chosen), None)

    def params(self) -> dict[str, str]:
        processor = self._processor()
        if processor is None:
            return {}
        return {param.name: self.cleaned_data.get(param_field_name(processor, param), "") for param in processor.params}

    def request(self) -> Request:
        return replace(super().request(), shape=self.cleaned_data["shape"])

    def spec(self) -> JobSpec:
        """The job the form asks for, in its four parts (the one place form fields become a spec)."""
        cleaned = self.cleaned_data
        lines = _lines(cleaned["location"])
        data = Data(
            file=_named(cleaned["data"]),
            upload=cleaned["upload"],
            location=cleaned["location"] if len(lines) < 2 else "",
            locations=lines if len(lines) > 1 else (),
            s3_credentials=self.s3_credentials(),
            sha256=cleaned["sha256"],
        )
        work = Work(
            cleaned["work"],
            self.params(),
            model=_named(cleaned["model"]),
            model_location=cleaned["model_location"],
            model_from_job=cleaned["model_from_job"],
            model_s3_credentials=self.s3_credentials("model_"),
        )
        return JobSpec(work, data, self.request(), self.kept_for(), sample=cleaned["sample"])


def _lines(given: str) -> tuple[str, ...]:
    """The locations typed one a line, blank lines left out; split at line ends only, so a location holding
    another line separator (U+2028) is refused by submit, as typed, rather than cut in two."""
    return tuple(line.removesuffix("\r") for line in given.split("\n") if line.strip())


def _named(uploaded: UploadedFile | None) -> NamedFile | None:
    return NamedFile(uploaded.file, uploaded.name) if uploaded else None


def asked_again(job: Job, kept_models: Iterable[Job]) -> tuple[dict, str]:
    """The job form's fields as `job` asked for them, to submit it again, and what the partner still has to
    give: its work and parameters, its request and retention, its data's location when it came from one (an
    upload, or a pre-signed URL, whose signature is not kept, is given again), and its model while it is kept."""
    initial = {
        "work": job.work,
        "shape": job.shape,
        "request_kind": job.request,
        "max_gpus": job.max_gpus or "",
        "gpus": job.gpus,
        "hours": job.hours,
        "allow_partial": job.allow_partial,
        "retention": "keep" if job.retention_days else "delete",
        "keep_days": job.retention_days or None,
        "output_days": job.output_keep_days,
        "sample": job.kind == Job.Kind.SAMPLE,
    }
    if job.work in {processor.name for processor in processors.available()}:
        processor, given = processors.get(job.work), job.params_given
        for param in processor.params:
            if param.name in given:
                initial[param_field_name(processor, param)] = given[param.name]
    locations = [part["location"] for part in job.source_parts]
    # A part's query (a signature) is never kept: shown or already wiped ("?…"), the part is asked for again.
    kept = [given for given, part in zip(locations, job.parts_shown, strict=True) if given == part["location"]]
    if locations and len(kept) == len(locations) and not any(given.endswith("?…") for given in kept):
        initial["location"] = "\n".join(locations)
        still_to_give = ""
    elif locations:
        still_to_give = "Give the parts' locations again: their signatures are not kept."
    elif job.source_kind != Job.Source.UPLOAD and job.source_location == job.source_uri:
        initial["location"] = job.source_uri
        still_to_give = ""
    elif job.source_kind == Job.Source.UPLOAD:
        still_to_give = f"Choose the dataset again ({job.source_name}): an upload is not kept for a new job."
    else:
        still_to_give = f"Give the data's location again ({job.source_location}): its credentials are not kept."
    if job.model_path:
        if any(kept.pk == job.pk for kept in kept_models):
            initial["model_from_job"] = job.pk
        else:
            still_to_give += f" Give the model again ({job.model_name}): its job no longer keeps it."
    if job.source_kind == Job.Source.S3:
        still_to_give += " S3 credentials, if the bucket needs them, are given again: none is kept."
    return initial, still_to_give.strip()
