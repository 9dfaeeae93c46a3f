"""Every name a person types for a job (its fields, its parameters, its file's name, the operator's hold
reason, the command line's) is kept without the characters that would disguise it in a page or console."""

import base64

import pytest
from django.core.management import call_command

from jobs.models import Job, State, Upload
from tests.factories import make_job
from tests.jobs.uploads.tus import TUS
from tests.support import EXAMPLE, client_for, job_form

pytestmark = pytest.mark.django_db

HIDDEN = ["\u202e", "\u200b", "\u2066", "\ufeff", "\u061c"]


@pytest.mark.parametrize("hidden", HIDDEN)
def test_it_keeps_a_posted_file_s_name_without_hidden_characters(partner_client, online_slots, hidden):
    response = partner_client.post("/jobs/new/", job_form(name=f"invoice{hidden}vsc.csv"))
    assert response.status_code == 302
    assert Job.objects.get().source_name == "invoicevsc.csv"


def test_it_keeps_the_accent_of_a_file_name_typed_as_a_combining_mark(partner_client, online_slots):
    assert partner_client.post("/jobs/new/", job_form(name="Chloe\u0301.csv")).status_code == 302
    assert Job.objects.get().source_name == "Chlo\u00e9.csv"


@pytest.mark.parametrize("hidden", HIDDEN)
def test_it_keeps_a_resumable_upload_s_name_without_hidden_characters(partner_client, hidden):
    name = base64.b64encode(f"invoice{hidden}gnp.exe.csv".encode()).decode()
    response = partner_client.post(
        "/jobs/uploads/", HTTP_UPLOAD_LENGTH="10", HTTP_UPLOAD_METADATA=f"filename {name}", **TUS
    )
    assert response.status_code == 201
    assert Upload.objects.get().filename == "invoicegnp.exe.csv"


def test_it_cleans_the_job_form_s_text_fields_and_parameters(partner_client, online_slots):
    fields = {
        "param-clean-table-types": "\u202eid:int\u200b",
        "param-clean-table-type_threshold": "0.9\ufeff",
        "sha256": "\u2066" + "a" * 64 + "\u2069",
    }
    response = partner_client.post("/jobs/new/", job_form(**fields))
    assert response.status_code == 302, response.content.decode()
    job = Job.objects.get()
    assert (job.params["types"], job.params["type_threshold"]) == ("id:int", 0.9)
    assert job.expected_sha256 == "a" * 64


def test_it_cleans_the_operator_s_hold_reason(organisation, operator):
    job = make_job(organisation, State.QUEUED)
    form = {"action": "put_on_hold", "_selected_action": [job.pk], "apply": "Put on hold"}
    client_for(operator).post("/admin/jobs/job/", {**form, "reason": "fleet\u202e maintenance\u200b"}, follow=True)
    assert Job.objects.get(pk=job.pk).on_hold_reason == "fleet maintenance"


def test_it_cleans_the_command_line_s_parameters_and_file_name(organisation, partner, online_slots, tmp_path):
    data = tmp_path / "invoice\u202evsc.csv"
    data.write_bytes(EXAMPLE.read_bytes())
    call_command(
        "submit", "--org", "partner-lab", "--as", "partner",
        "--data", str(data), "--work", "clean-table", "--gpus", "1", "--hours", "1",
        "--param", "\u200btypes=\u2066id:int\u2069",
    )  # fmt: skip
    job = Job.objects.get()
    assert (job.source_name, job.params["types"]) == ("invoicevsc.csv", "id:int")
