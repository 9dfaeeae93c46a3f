"""`e31 jobs`, `status` and `cancel` against the portal the tests start: the organisation's jobs
listed and filtered, one job's figures, a cancel, and the page's sentence when it can no longer be."""

import json
import re
from datetime import timedelta

from django.utils import timezone

from jobs.models import AtRisk, Job, State
from tests.factories import finished_sample, make_job


def test_it_lists_shows_and_cancels_a_job(e31, organisation, other_organisation):
    ended = make_job(organisation, state=State.SUCCEEDED, source_name="old.csv")
    waiting = make_job(organisation, state=State.QUEUED, source_name="customers.csv", gpus=2)
    make_job(other_organisation, state=State.QUEUED, source_name="theirs.csv")
    cancelled = e31("cancel", str(waiting.pk))
    assert (cancelled.returncode, cancelled.stdout) == (0, f"Job {waiting.pk}: cancelled\n"), cancelled.stderr
    assert Job.objects.get(pk=waiting.pk).state == State.CANCELLED
    again = e31("cancel", str(waiting.pk))
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == f"e31: Job {waiting.pk} has ended (cancelled) and can no longer be cancelled.\n"
    listed = e31("jobs")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATE", "WORK", "DATA", "REQUEST", "CREATED"]
    assert re.match(rf"{waiting.pk}\s+cancelled\s+clean-table\s+customers\.csv\s+2 × 1(\.00)? h", lines[1])
    assert re.match(rf"{ended.pk}\s+succeeded\s+clean-table\s+old\.csv", lines[2])
    assert len(lines) == 3, "the other organisation's job is not listed"
    only = e31("jobs", "--state", "succeeded").stdout.splitlines()
    assert [line.split()[0] for line in only[1:]] == [str(ended.pk)]
    shown = e31("status", str(waiting.pk), "--json")
    assert json.loads(shown.stdout)["state"] == "cancelled"
    assert e31("status", str(waiting.pk)).stdout.startswith(f"Job {waiting.pk}: cancelled\n")


def test_it_says_not_found_in_one_line_for_a_job_of_another_organisation(e31, other_organisation):
    theirs = make_job(other_organisation, state=State.QUEUED)
    for argv in (("status", str(theirs.pk)), ("cancel", str(theirs.pk)), ("download", str(theirs.pk))):
        refused = e31(*argv)
        assert (refused.returncode, refused.stdout) == (1, ""), argv
        assert refused.stderr.startswith("e31: ") and refused.stderr.count("\n") == 1, refused.stderr
    assert Job.objects.get(pk=theirs.pk).state == State.QUEUED


def test_a_pass_takes_its_time_limit_from_the_samples_estimate_unless_given(e31, organisation, online_slots):
    sample = finished_sample(organisation)
    made = e31("pass", str(sample.pk), "--gpus", "2")
    assert made.returncode == 0, made.stderr
    estimate = e31("estimate", str(sample.pk), "--gpus", "2", "--json")
    hours = json.loads(estimate.stdout)["estimate"]["hours"]
    assert f"The time limit is the sample's estimate for 2: {hours} h." in made.stderr
    full = Job.objects.get(pk=int(made.stdout))
    assert (full.kind, full.gpus, str(full.hours.normalize())) == (Job.Kind.PASS, 2, hours)
    given = e31("pass", str(sample.pk), "--gpus", "1", "--hours", "3")
    assert given.returncode == 0, given.stderr
    assert Job.objects.get(pk=int(given.stdout)).hours == 3


def test_the_receipt_of_a_job_that_was_never_held_says_nothing_was_charged(e31, organisation):
    failed = make_job(organisation, state=State.FAILED, error="Staging failed: The file is empty.")
    receipt = e31("receipt", str(failed.pk))
    assert (receipt.returncode, receipt.stdout) == (
        0,
        f"Nothing was charged for job {failed.pk}: it ended before its data was staged or anything was held.\n",
    ), receipt.stderr


def test_status_says_when_a_deadline_promised_at_submit_can_no_longer_be_met(e31, organisation):
    now = timezone.now()
    job = make_job(
        organisation, state=State.QUEUED, deadline=now + timedelta(hours=2), deadline_feasible=True,
        deadline_at_risk_since=now, deadline_at_risk_reason=AtRisk.EARLIER_DEADLINE,
        deadline_at_risk_finish=now + timedelta(hours=3),
    )  # fmt: skip
    shown = e31("status", str(job.pk))
    assert shown.returncode == 0, shown.stderr
    [line] = [line for line in shown.stdout.splitlines() if line.startswith("  deadline ")]
    assert line == f"  deadline {Job.objects.get(pk=job.pk).deadline_at_risk}"
    assert "can no longer be met: a job with an earlier deadline, submitted after it, takes the GPUs first" in line
