"""The numbers of a request, typed in the job form or given to `manage.py submit`: ASCII digits only, and
whatever else arrives (other scripts' digits, signs, exponents, huge values) is a clear refusal, never a
crash, with nothing stored."""

import html

import pytest
from django.core.management import CommandError, call_command

from jobs.models import Job
from tests.factories import finished_sample
from tests.support import EXAMPLE, job_form

pytestmark = pytest.mark.django_db

ODD = ["²", "١", "٢", "+2", "- 1", "1e1", "0x2", "1_0", "2.0", "9" * 5000]


@pytest.mark.parametrize("value", ODD)
@pytest.mark.parametrize(
    ("field", "sentence"),
    [
        ("gpus", "GPUs must be a whole number, not "),
        ("keep_days", "Keep the staged copy 0 to 90 days, not "),
        ("output_days", "Keep the output 1 to 365 days, not "),
    ],
)
def test_it_refuses_a_count_in_the_job_form_that_is_not_ascii_digits(
    partner_client, online_slots, field, sentence, value
):
    response = partner_client.post("/jobs/new/", job_form(**{field: value, "retention": "keep"}))
    assert response.status_code == 400
    assert response.context["form"].errors[field][0].startswith(sentence)
    assert not Job.objects.exists()


@pytest.mark.parametrize(("hours", "message"), [("1e30", "Hours must be a number"), ("9" * 5000, "at most 72 hours")])
def test_it_refuses_huge_hours_in_the_job_form(partner_client, online_slots, hours, message):
    response = partner_client.post("/jobs/new/", job_form(hours=hours))
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Job.objects.exists()


def submit(*args: str) -> None:
    call_command(
        "submit", "--org", "partner-lab", "--as", "partner", "--data", str(EXAMPLE), "--work", "clean-table", *args
    )


@pytest.mark.parametrize("gpus", ODD)
def test_it_refuses_gpus_on_the_command_line_that_are_not_ascii_digits(organisation, partner, online_slots, gpus):
    with pytest.raises(CommandError) as refused:
        submit("--gpus", gpus, "--hours", "1")
    assert str(refused.value).startswith("Refused: GPUs must be a whole number, not '")
    assert len(str(refused.value)) < 100
    assert not Job.objects.exists()


@pytest.mark.parametrize("hours", ["9" * 5000, "1" + "0" * 40 + ".5"])
def test_it_refuses_huge_hours_on_the_command_line(organisation, partner, online_slots, hours):
    with pytest.raises(CommandError) as refused:
        submit("--gpus", "1", "--hours", hours)
    assert str(refused.value).startswith("Refused: A job can run at most 72 hours; this asks for ")
    assert not Job.objects.exists()


# A fraction's digits: other scripts' (Arabic-Indic one and a half, with its own separator), exponents, grouping,
# signs and the words float() reads.
ODD_FRACTIONS = ["١", "١٫٥", "1.٥", "٠.99", "1e0", "1E-1", "1_0", "+1", "inf", "nan", "1.2.3", "."]


@pytest.mark.parametrize("hours", ODD_FRACTIONS)
def test_it_refuses_hours_that_are_not_ascii_digits_at_every_door(
    partner_client, organisation, partner, online_slots, hours
):
    response = partner_client.post("/jobs/new/", job_form(hours=hours))
    assert response.status_code == 400
    assert response.context["form"].errors["hours"][0] == f"Hours must be a number, not {hours!r}."
    with pytest.raises(CommandError, match=r"^Refused: Hours must be a number, not "):
        submit("--gpus", "1", "--hours", hours)
    assert not Job.objects.exists()


@pytest.mark.parametrize("threshold", ODD_FRACTIONS)
def test_it_refuses_a_number_parameter_that_is_not_ascii_digits(partner_client, online_slots, threshold):
    form = job_form(**{"param-clean-table-type_threshold": threshold})
    response = partner_client.post("/jobs/new/", form)
    assert response.status_code == 400
    assert f"type_threshold must be a float, not {threshold!r}" in html.unescape(response.content.decode())
    assert not Job.objects.exists()


@pytest.mark.parametrize("gpus", ["9" * 400, "²", "١", "+1"])
def test_it_gives_no_estimate_for_a_sample_s_pass_on_a_count_that_is_not_one(partner_client, organisation, gpus):
    sample = finished_sample(organisation)
    response = partner_client.get(f"/jobs/{sample.pk}/estimate/", {"gpus": gpus})
    assert response.status_code == 200
    assert "Give a whole number" in response.content.decode()
