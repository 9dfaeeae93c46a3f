"""Emails when a pass ends, to whoever submitted it: through a real SMTP server on loopback, sent by
the worker that ended the job (or by the web process, for a cancel)."""

import logging

import pytest
from django.utils import timezone

from jobs import lifecycle, notify
from jobs.models import Job, State
from tests.conftest import client_for, job_form, wait_for, wait_for_end

PARTNER = "partner@example.com"


@pytest.mark.django_db(transaction=True)
def test_the_partner_hears_when_their_pass_succeeds(fleet, partner_client, mailbox, rate_card):
    assert partner_client.post("/jobs/new/", job_form()).status_code == 302
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED

    (sent,) = wait_for(lambda: mailbox.to(PARTNER), timeout=30, what="the email")
    assert sent["Subject"] == f"Job #{job.pk} succeeded: clean-table over customers.csv"
    body = sent.get_content()
    assert f"{job.records_out:,} records out, {job.records_rejected:,} rejected." in body
    assert "The output is kept until " in body
    assert "CPU slot-hours: " in body and " USD." in body
    assert f"The job: http://127.0.0.1:8000/jobs/{job.pk}/" in body
    assert f"Its receipt: http://127.0.0.1:8000/billing/receipts/{job.pk}/" in body


@pytest.mark.django_db(transaction=True)
def test_a_cancel_is_told_unless_the_submitter_cancelled_it(
    fleet, organisation, partner, partner_client, operator, mailbox
):
    def waiting() -> Job:  # more slots than the fleet has: it stays queued
        return Job.objects.create(
            organisation=organisation, created_by=partner, work="clean-table", source_name="a.csv", gpus=9, hours=1,
            state=State.QUEUED, queued_at=timezone.now(),
        )  # fmt: skip

    own, theirs = waiting(), waiting()
    assert partner_client.post(f"/jobs/{own.pk}/cancel/").status_code == 302
    client_for(operator).post("/admin/jobs/job/", {"action": "cancel", "_selected_action": [theirs.pk]})

    (sent,) = wait_for(lambda: mailbox.to(PARTNER), timeout=30, what="the email")
    assert sent["Subject"] == f"Job #{theirs.pk} cancelled: clean-table over a.csv"
    assert "Nothing was held, and nothing is charged for compute." in sent.get_content()
    # The control worker takes its tasks in order: an email for the first cancel would have come first.
    assert len(mailbox.to(PARTNER)) == 1


@pytest.mark.django_db
def test_a_failure_says_why(organisation, partner, mailbox):
    job = Job.objects.create(
        organisation=organisation, created_by=partner, work="clean-table", source_name="a.csv", gpus=1, hours=1
    )
    lifecycle.fail(job, "Staging failed: line 7: an unmatched quote.")
    assert notify.job_ended(job.pk)
    (sent,) = mailbox.to(PARTNER)
    assert sent["Subject"] == f"Job #{job.pk} failed: clean-table over a.csv"
    assert "Staging failed: line 7: an unmatched quote." in sent.get_content()


@pytest.mark.django_db
def test_nobody_is_emailed_for_a_sample_a_cli_job_or_a_job_still_running(organisation, partner, mailbox):
    def ended(**fields) -> Job:
        return Job.objects.create(
            organisation=organisation, work="clean-table", source_name="a.csv", gpus=1, hours=1,
            state=State.SUCCEEDED, **fields,
        )  # fmt: skip

    sample, from_cli = ended(kind=Job.Kind.SAMPLE, created_by=partner), ended()
    running = ended(created_by=partner)
    Job.objects.filter(pk=running.pk).update(state=State.RUNNING)
    assert not any(notify.job_ended(job.pk) for job in (sample, from_cli, running))
    assert not mailbox.messages


@pytest.mark.django_db
def test_a_mail_server_that_is_down_never_stops_a_job_ending(organisation, partner, mailbox, settings, caplog):
    settings.EMAIL_PORT = 9  # nothing listens there
    job = Job.objects.create(
        organisation=organisation, created_by=partner, work="clean-table", source_name="a.csv", gpus=1, hours=1,
        state=State.TIMED_OUT,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="jobs.notify"):
        assert not notify.job_ended(job.pk)
    assert f"job {job.pk}: the email to {PARTNER} was not sent" in caplog.text
