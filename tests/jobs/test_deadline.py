"""A job's deadline: the hold ends at the deadline at the latest, and a job that has not started by
then ends failed without ever holding a GPU."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from billing.models import LedgerEntry
from jobs import lifecycle, services, tasks
from jobs.models import Job, State
from jobs.scheduling import latest_start, schedule
from jobs.spec import Data, JobSpec, NamedFile, Request, Work
from tests.datasets import csv_bytes
from tests.factories import make_job
from tests.support import EXAMPLE, job_form, wait_for_end


def _queued(organisation, gpus: int = 1, hours: float = 1, **fields) -> Job:
    return make_job(organisation, State.QUEUED, gpus=gpus, hours=hours, **fields)


@pytest.mark.django_db
def test_the_form_takes_a_deadline_in_the_future_only(partner_client, online_slots):
    past = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    for bad, message in [
        (past, "has passed; give a later one."),
        ("next tuesday", "A deadline is a date and time such as 2026-12-01T18:00 (UTC unless it says otherwise), not"),
    ]:
        response = partner_client.post("/jobs/new/", job_form(deadline=bad))
        assert response.status_code == 400 and message in response.context["form"].errors["deadline"][0]
    assert not Job.objects.exists()

    tomorrow = (timezone.now() + timedelta(days=1)).replace(second=0, microsecond=0)
    assert partner_client.post("/jobs/new/", job_form(deadline=f"{tomorrow:%Y-%m-%dT%H:%M}")).status_code == 302
    job = Job.objects.get()
    assert job.deadline == tomorrow
    page = partner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert f"<dt>Deadline</dt><dd>{tomorrow:%Y-%m-%d %H:%M} UTC: the hold ends then at the latest</dd>" in page
    Job.objects.filter(pk=job.pk).update(state=State.QUEUED, queued_at=timezone.now())
    for on_hold in (False, True):
        if on_hold:
            lifecycle.put_on_hold(job)
        page = partner_client.get(f"/jobs/{job.pk}/").content.decode()
        assert f'If it has not started by its deadline, <span class="when">{tomorrow:%Y-%m-%d %H:%M}</span> UTC' in page


@pytest.mark.django_db
def test_the_cli_reads_an_iso_deadline_as_utc_unless_it_says_otherwise(organisation, partner, online_slots):
    common = [
        "--org",
        organisation.slug,
        "--as",
        "partner",
        "--data",
        str(EXAMPLE),
        "--work",
        "clean-table",
        "--gpus",
        "1",
    ]
    call_command("submit", *common, "--hours", "1", "--deadline", "2099-01-02T03:04")
    call_command("submit", *common, "--hours", "1", "--deadline", "2099-01-02T03:04+02:00")
    first, second = Job.objects.order_by("pk")
    assert first.deadline == datetime(2099, 1, 2, 3, 4, tzinfo=UTC)
    assert second.deadline == datetime(2099, 1, 2, 1, 4, tzinfo=UTC)
    with pytest.raises(CommandError, match=r"Refused: The deadline, 2001-01-01 00:00 UTC, has passed"):
        call_command("submit", *common, "--hours", "1", "--deadline", "2001-01-01")
    with pytest.raises(CommandError, match=r"Refused: A deadline is a date and time such as 2026-12-01T18:00 \(UTC"):
        call_command("submit", *common, "--hours", "1", "--deadline", "soon")


@pytest.mark.django_db
def test_a_job_still_waiting_at_its_deadline_ends_without_holding_anything(organisation, online_slots):
    soon = timezone.now() + timedelta(minutes=5)
    waiting, staging, later = (
        _queued(organisation, deadline=soon),
        _queued(organisation, deadline=soon),
        _queued(organisation),
    )
    Job.objects.filter(pk=staging.pk).update(state=State.STAGING)
    page_job = Job.objects.get(pk=waiting.pk)
    assert page_job.deadline_passed() is False

    Job.objects.filter(pk__in=[waiting.pk, staging.pk]).update(deadline=timezone.now() - timedelta(seconds=1))
    assert sorted(tasks.enforce_time_limits()) == sorted([waiting.pk, staging.pk])
    for job in (waiting, staging):
        job.refresh_from_db()
        assert job.state == State.FAILED and not job.allocations.exists()
        assert job.error.startswith("Its deadline, ") and job.error.endswith(
            "came before it could start; nothing was held."
        )
        assert not LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD).exists()
    assert Job.objects.get(pk=later.pk).state == State.QUEUED

    held_before = _queued(organisation, started_at=timezone.now() - timedelta(hours=1), deadline=timezone.now())
    assert lifecycle.miss_deadline(held_before)
    assert Job.objects.get(pk=held_before.pk).error.endswith(
        "came before it could be held again; what it did before is kept."
    )


@pytest.mark.django_db
def test_the_scheduler_never_starts_a_job_past_its_deadline(organisation, online_slots):
    late = _queued(organisation, deadline=timezone.now() + timedelta(minutes=5))
    Job.objects.filter(pk=late.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    next_one = _queued(organisation)
    assert schedule() == [next_one.pk]
    assert Job.objects.get(pk=late.pk).state == State.FAILED


@pytest.mark.django_db
def test_a_deadline_cuts_the_hold_and_the_latest_starts_behind(organisation, online_slots):
    now = timezone.now()
    busy = _queued(organisation, gpus=4, hours=3, deadline=now + timedelta(hours=1))
    assert lifecycle.start_hold(busy, online_slots)
    busy.refresh_from_db()
    assert busy.time_limit_at() == busy.deadline, "its deadline comes before its 3 hours are up"
    too_late = _queued(organisation, gpus=4, deadline=now + timedelta(minutes=30))
    behind = _queued(organisation, gpus=4)
    assert latest_start(too_late, now=now) is None, "the fleet frees up only after its deadline"
    assert latest_start(behind, now=now) == busy.deadline, "the job that would end unheld holds nothing up"

    Job.objects.filter(pk=busy.pk).update(deadline=timezone.now())
    lifecycle.time_out(Job.objects.get(pk=busy.pk))
    busy.refresh_from_db()
    assert busy.error == f"The job reached its deadline, {busy.deadline:%Y-%m-%d %H:%M} UTC."
    assert {a.held_to for a in busy.allocations.all()} == {busy.deadline}


@pytest.mark.django_db
def test_a_sample_hands_its_deadline_to_the_full_pass_form(organisation, partner, partner_client, online_slots):
    deadline = (timezone.now() + timedelta(days=2)).replace(second=0, microsecond=0)
    with EXAMPLE.open("rb") as data:
        data = Data(file=NamedFile(data, "customers.csv"))
        spec = JobSpec(Work("clean-table"), data, Request(2, 1, deadline=deadline), sample=True)
        sample = services.submit_job(organisation, partner, spec)
    assert sample.deadline is None, "a sample runs minutes, whenever it can"
    measured = {"records_per_second": 100.0, "records": 100, "records_total": 5000, "seconds": 1.0}
    Job.objects.filter(pk=sample.pk).update(
        state=State.SUCCEEDED,
        staged_path="x.csv",
        records_total=5000,
        sample_result={**sample.sample_result, **measured},
    )
    page = partner_client.get(f"/jobs/{sample.pk}/").content.decode()
    assert f'name="deadline" value="{deadline:%Y-%m-%dT%H:%M}"' in page


@pytest.mark.django_db(transaction=True)
def test_a_running_job_stops_at_its_deadline_and_is_billed_until_then(fleet, partner_client):
    deadline = (timezone.now() + timedelta(seconds=40)).replace(microsecond=0)
    form = job_form(csv_bytes(1000), name="numbers.csv", work="test-slow-echo", hours="1")
    form["param-test-slow-echo-seconds_per_batch"] = "4"
    form["deadline"] = deadline.strftime("%Y-%m-%dT%H:%M:%S")
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=120)

    assert job.state == State.TIMED_OUT and job.deadline == deadline
    assert job.error == f"The job reached its deadline, {deadline:%Y-%m-%d %H:%M} UTC."
    # A slot whose beat a loaded machine held up past the node timeout ends its hold when it was last seen (and
    # may be held again): the holds end by the deadline, the last of them at it, and so is the bill.
    ends = [allocation.held_to for allocation in job.allocations.all()]
    assert max(ends) == deadline and all(end <= deadline for end in ends), ends
    billed = LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD).values_list("held_to", flat=True)
    assert max(billed) == deadline and all(end <= deadline for end in billed), list(billed)


@pytest.mark.django_db
def test_a_hold_never_starts_nor_is_billed_past_the_deadline(organisation, online_slots):
    late = _queued(organisation, deadline=timezone.now() + timedelta(minutes=5))
    read_before = Job.objects.get(pk=late.pk)  # as the scheduler had it, before the deadline came
    Job.objects.filter(pk=late.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert lifecycle.start_hold(read_before, online_slots[:1]) == []

    job = _queued(organisation, deadline=timezone.now() + timedelta(minutes=5))
    assert lifecycle.start_hold(job, online_slots[:1])
    started = timezone.now() - timedelta(minutes=10)
    job.allocations.update(held_from=started)
    Job.objects.filter(pk=job.pk).update(started_at=started, deadline=timezone.now() - timedelta(seconds=1))
    lifecycle.cancel(job)  # it came after the deadline, before beat or its slot noticed
    deadline = Job.objects.get(pk=job.pk).deadline
    assert {a.held_to for a in job.allocations.all()} == {deadline}
    assert LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.HOLD).held_to == deadline
