"""Emails when a pass ends, to whoever submitted it: through a real SMTP server on loopback, sent by
the worker that ended the job (or by the web process, for a cancel)."""

import logging

import pytest

from jobs import lifecycle, notify
from jobs.models import Job, State
from tests.factories import make_job
from tests.support import client_for, job_form, wait_for, wait_for_end

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
    assert f"The job: http://portal.test/jobs/{job.pk}/" in body
    assert f"Its receipt: http://portal.test/billing/receipts/{job.pk}/" in body


@pytest.mark.django_db
def test_a_cancel_is_told_unless_the_submitter_cancelled_it(
    organisation, partner, partner_client, operator, django_capture_on_commit_callbacks
):
    def waiting() -> Job:
        return make_job(organisation, State.QUEUED, created_by=partner)

    def notifies(callbacks) -> bool:  # what the commit would send: each callback names its task
        return any("notify_ended" in repr(callback) for callback in callbacks)

    own, theirs = waiting(), waiting()
    with django_capture_on_commit_callbacks() as callbacks:
        assert partner_client.post(f"/jobs/{own.pk}/cancel/").status_code == 302
    assert Job.objects.get(pk=own.pk).state == State.CANCELLED and not notifies(callbacks)
    with django_capture_on_commit_callbacks() as callbacks:
        client_for(operator).post("/admin/jobs/job/", {"action": "cancel", "_selected_action": [theirs.pk]})
    assert Job.objects.get(pk=theirs.pk).state == State.CANCELLED and notifies(callbacks)


@pytest.mark.django_db
def test_a_failure_says_why(organisation, partner, mailbox):
    job = make_job(organisation, created_by=partner)
    lifecycle.fail(job, "Staging failed: line 7: an unmatched quote.")
    assert notify.job_ended(job.pk)
    (sent,) = mailbox.to(PARTNER)
    assert sent["Subject"] == f"Job #{job.pk} failed: clean-table over a.csv"
    assert "Staging failed: line 7: an unmatched quote." in sent.get_content()


@pytest.mark.django_db
def test_nobody_is_emailed_for_a_sample_a_cli_job_or_a_job_still_running(organisation, partner, mailbox):
    def ended(**fields) -> Job:
        return make_job(organisation, State.SUCCEEDED, **fields)

    sample, from_cli = ended(kind=Job.Kind.SAMPLE, created_by=partner), ended()
    running = ended(created_by=partner)
    Job.objects.filter(pk=running.pk).update(state=State.RUNNING)
    assert not any(notify.job_ended(job.pk) for job in (sample, from_cli, running))
    assert not mailbox.messages


@pytest.mark.django_db
def test_a_mail_server_that_is_down_never_stops_a_job_ending(organisation, partner, mailbox, settings, caplog):
    settings.EMAIL_PORT = 9  # nothing listens there
    job = make_job(organisation, State.TIMED_OUT, created_by=partner)
    with caplog.at_level(logging.WARNING, logger="jobs.notify"):
        assert not notify.job_ended(job.pk)
    assert f"job {job.pk}: the email to {PARTNER} was not sent" in caplog.text


@pytest.mark.django_db
def test_it_tells_once_and_only_a_member_of_the_jobs_organisation(organisation, other_organisation, partner, mailbox):
    job = make_job(organisation, State.SUCCEEDED, created_by=partner)
    assert notify.job_ended(job.pk)
    assert not notify.job_ended(job.pk), "a second delivery of the task sends nothing"
    assert len(mailbox.to(PARTNER)) == 1

    moved = make_job(organisation, State.SUCCEEDED, created_by=partner, source_name="b.csv")
    partner.membership.organisation = other_organisation
    partner.membership.save()
    assert not notify.job_ended(moved.pk), "they left the organisation: its jobs are no longer theirs to hear of"
    assert len(mailbox.to(PARTNER)) == 1


@pytest.mark.django_db
def test_an_email_the_mail_server_refused_is_left_to_be_sent_again(organisation, partner, mailbox, settings):
    port = settings.EMAIL_PORT
    settings.EMAIL_PORT = 9  # nothing listens there
    job = make_job(organisation, State.SUCCEEDED, created_by=partner)
    assert not notify.job_ended(job.pk)
    assert Job.objects.get(pk=job.pk).notified_at is None, "untold, for the safety net to try again"
    settings.EMAIL_PORT = port
    assert notify.job_ended(job.pk)
    assert len(mailbox.to(PARTNER)) == 1 and Job.objects.get(pk=job.pk).notified_at is not None
