"""Retention policies: the operators' limits on how long staged copies and outputs are kept, for every
organisation or for one. The job form, the pass form and the CLI keep to the policy in force when the
job is submitted, and the job keeps what it chose."""

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import RetentionPolicy
from jobs import services
from jobs.models import Job
from jobs.spec import Retention
from tests.support import client_for, job_form, submit_example

pytestmark = pytest.mark.django_db


def policy(organisation=None, staged=14, output=10, longest=60, starts=None) -> RetentionPolicy:
    return RetentionPolicy.objects.create(
        organisation=organisation, max_staged_days=staged, output_days=output, max_output_days=longest,
        effective_from=starts or timezone.now() - timedelta(minutes=1),
    )  # fmt: skip


def test_an_organisations_own_policy_stands_in_for_the_general_one_and_the_settings_for_none(
    organisation, other_organisation
):
    built_in = RetentionPolicy.in_force(organisation)
    assert (built_in.pk, built_in.max_staged_days, built_in.output_days, built_in.max_output_days) == (
        None,
        90,
        30,
        365,
    )

    general = policy(staged=14)
    policy(organisation, staged=0, starts=timezone.now() + timedelta(days=1))
    assert RetentionPolicy.in_force(organisation) == general, "its own starts tomorrow"
    own = policy(organisation, staged=0)
    policy(staged=21)  # a newer general policy does not override an organisation's own
    assert RetentionPolicy.in_force(organisation) == own
    assert RetentionPolicy.in_force(other_organisation).max_staged_days == 21


def test_the_job_form_keeps_to_the_policy_in_force(organisation, partner_client, online_slots):
    policy(staged=14, output=10, longest=60)

    page = partner_client.get("/jobs/new/").content.decode()
    assert 'name="keep_days" value="7" min="1" max="14"' in page
    assert 'name="output_days" value="10" min="1" max="60"' in page
    for bad, message in [
        ({"retention": "keep", "keep_days": "15"}, "Keep the staged copy 0 to 14 days, not 15."),
        ({"output_days": "61"}, "Keep the output 1 to 60 days, not 61."),
    ]:
        response = partner_client.post("/jobs/new/", job_form(**bad))
        assert response.status_code == 400 and message in response.content.decode()
    assert not Job.objects.exists()

    assert partner_client.post("/jobs/new/", job_form(retention="keep", keep_days="14")).status_code == 302
    assert (Job.objects.get().retention_days, Job.objects.get().output_keep_days) == (14, 10), "the policy's default"


def test_a_policy_that_keeps_no_staged_copy_offers_none_and_samples_keep_none(
    organisation, partner, partner_client, online_slots
):
    policy(organisation, staged=0)

    page = partner_client.get("/jobs/new/").content.decode()
    assert 'value="keep"' not in page and "deleted when the job ends (the retention policy)" in page
    assert "Its staged copy is kept at least" not in page, "a sample keeps it no longer than the policy allows"
    refused = partner_client.post("/jobs/new/", job_form(retention="keep", keep_days="3"))
    assert refused.status_code == 400
    assert "The retention policy keeps no staged copy: it is deleted when the job ends." in refused.content.decode()
    with pytest.raises(services.SubmitError, match=r"Keep the staged copy 0 to 0 days, not 1\."):
        submit_example(organisation, partner, retention=Retention(1))  # the CLI's --keep-days

    assert submit_example(organisation, partner, sample=True).retention_days == 0


def test_a_job_keeps_what_it_chose_when_the_policy_changes(organisation, partner, online_slots):
    job = submit_example(organisation, partner, retention=Retention(60, output_days=200))
    policy(staged=1, output=1, longest=1)
    job.refresh_from_db()
    assert (job.retention_days, job.output_keep_days) == (60, 200)
    with pytest.raises(services.SubmitError, match=r"Keep the output 1 to 1 days, not 200\."):
        submit_example(organisation, partner, retention=Retention(output_days=200))


def policy_form(starts, organisation="", staged="14", output="10", longest="60") -> dict:
    return {
        "organisation": organisation,
        "max_staged_days": staged,
        "output_days": output,
        "max_output_days": longest,
        "effective_from_0": f"{starts:%Y-%m-%d}",
        "effective_from_1": f"{starts:%H:%M:%S}",
        "note": "",
    }


def test_operators_add_policies_from_now_on_and_never_change_one_in_force(operator, organisation):
    client = client_for(operator)
    form = client.get("/admin/billing/retentionpolicy/add/").content.decode()
    assert 'name="max_staged_days" value="90"' in form and 'name="max_output_days" value="365"' in form, "the settings'"
    in_force = policy()

    assert (
        client.post(f"/admin/billing/retentionpolicy/{in_force.pk}/change/", policy_form(timezone.now())).status_code
        == 403
    )
    assert client.post(f"/admin/billing/retentionpolicy/{in_force.pk}/delete/", {"post": "yes"}).status_code == 403
    back_dated = client.post("/admin/billing/retentionpolicy/add/", policy_form(timezone.now() - timedelta(hours=2)))
    assert "A retention policy cannot start in the past" in back_dated.content.decode()
    upside_down = client.post("/admin/billing/retentionpolicy/add/", policy_form(timezone.now(), output="90"))
    assert "At most the longest an output is kept, 60." in upside_down.content.decode()
    assert RetentionPolicy.objects.count() == 1

    added = client.post("/admin/billing/retentionpolicy/add/", policy_form(timezone.now(), organisation.pk, staged="0"))
    assert added.status_code == 302
    assert RetentionPolicy.in_force(organisation).max_staged_days == 0
    listed = client.get("/admin/billing/retentionpolicy/").content.decode()
    assert "every organisation" in listed and organisation.name in listed
