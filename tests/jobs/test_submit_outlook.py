"""At submit (issue 31): the kind of request and its width cap, whether a deadline can be met by the queue
now (expected start and finish), and the monthly spend cap."""

import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs import lifecycle, services
from jobs.management.commands.submit import outlook_line
from jobs.models import Job, Shard, State
from jobs.spec import Data, JobSpec, NamedFile, Request, Work
from portal.models import Organisation
from tests.factories import make_job

pytestmark = pytest.mark.django_db

CSV = b"id,name\n1,a\n2,b\n"


def _spec(**request) -> JobSpec:
    return JobSpec(
        Work("clean-table"),
        Data(file=NamedFile(io.BytesIO(CSV), "a.csv")),
        Request(request.pop("gpus", 2), request.pop("hours", 1), **request),
    )


def _checked(organisation, **request) -> Job:
    return services.check_job(organisation, _spec(**request))


def _refusals(organisation, **request) -> list[tuple[str, str]]:
    with pytest.raises(services.SubmitError) as refused:
        _checked(organisation, **request)
    return [(refusal.field, refusal.message) for refusal in refused.value.refusals]


def test_a_pass_without_a_deadline_is_flexible_and_one_with_a_deadline_fixed(organisation, online_slots):
    assert _checked(organisation).request == Job.Request.FLEXIBLE
    due = (timezone.now() + timedelta(hours=5)).isoformat()
    assert _checked(organisation, deadline=due).request == Job.Request.FIXED
    assert _checked(organisation, deadline=due, kind="flexible").request == Job.Request.FLEXIBLE
    assert _checked(organisation, kind=" Fixed ").request == Job.Request.FIXED
    wide = _checked(organisation, kind="flexible", max_gpus="4")
    assert (wide.max_gpus, wide.width_cap) == (4, 4)
    assert _checked(organisation, kind="flexible").width_cap == 2, "its GPUs when no cap is given"


@pytest.mark.parametrize(
    ("request_", "refused"),
    [
        ({"kind": "elastic"}, [("request", "A request is fixed or flexible, not 'elastic'.")]),
        ({"max_gpus": "0"}, [("max_gpus", "The width cap must be at least 1, not 0.")]),
        ({"max_gpus": "-3"}, [("max_gpus", "The width cap must be at least 1, not -3.")]),
        ({"max_gpus": "wide"}, [("max_gpus", "The width cap must be a whole number of GPUs, not 'wide'.")]),
        (
            {"max_gpus": "5"},
            [("max_gpus", "The fleet has 4 online that can run clean-table; cap the width at 4 or fewer.")],
        ),
        (
            {"kind": "fixed", "max_gpus": "2"},
            [("max_gpus", "A width cap is for a flexible request; a fixed one runs on exactly its GPUs.")],
        ),
        (
            {"gpus": "0", "kind": "rigid"},
            [("gpus", "Ask for at least one GPU, not 0."), ("request", "A request is fixed or flexible, not 'rigid'.")],
        ),
    ],
)
def test_a_bad_kind_or_width_is_refused_with_the_others(organisation, online_slots, request_, refused):
    assert _refusals(organisation, **request_) == refused
    assert not Job.objects.exists()


def test_a_feasible_deadline_is_told_when_it_would_finish(organisation, online_slots):
    due = timezone.now() + timedelta(hours=3)
    job = _checked(organisation, hours="1", deadline=due.isoformat())
    assert job.deadline_feasible is True
    assert job.expected_start <= timezone.now() + timedelta(seconds=5), "the fleet is free"
    assert job.expected_finish <= job.expected_start + timedelta(hours=1)


def test_a_deadline_is_promised_only_when_the_job_would_end_within_three_quarters_of_the_time_to_it(
    organisation, online_slots
):
    tight = timezone.now() + timedelta(hours=1, minutes=15)  # three quarters of it: 56 minutes
    job = _checked(organisation, hours="1", deadline=tight.isoformat())
    assert job.expected_finish <= tight, "it would end before its deadline on a free fleet"
    assert job.deadline_feasible is False, "but not within three quarters of the time to it: slots come back late"
    assert outlook_line(job).startswith(f"Expected to finish by {job.expected_finish:%Y-%m-%d %H:%M} UTC, too close")
    roomy = timezone.now() + timedelta(hours=1, minutes=25)  # three quarters of it: 64 minutes
    assert _checked(organisation, hours="1", deadline=roomy.isoformat()).deadline_feasible is True


def test_a_deadline_the_queue_cannot_meet_is_told_so_and_the_earliest_finish(organisation, online_slots):
    busy = make_job(organisation, State.QUEUED, gpus=4, hours=5)
    lifecycle.start_hold(busy, online_slots)
    due = timezone.now() + timedelta(hours=2)
    job = _checked(organisation, gpus="2", hours="1", deadline=due.isoformat())
    assert job.deadline_feasible is False
    assert job.expected_start >= timezone.now() + timedelta(hours=4, minutes=59), "when the fixed job's limit frees"
    assert job.expected_finish == job.expected_start + timedelta(hours=1)
    made = services.submit_job(organisation, None, _spec(gpus="2", hours="1", deadline=due.isoformat()))
    assert made.deadline_feasible is False, "submitted anyway: it runs as best effort"


def test_a_deadline_job_is_expected_on_slots_a_flexible_job_gives_back(organisation, online_slots):
    flexible = make_job(organisation, State.QUEUED, gpus=4, hours=5, request=Job.Request.FLEXIBLE)
    Shard.objects.bulk_create(
        Shard(job=flexible, index=n, first_record=n + 1, record_count=1, first_line=n + 2, start_byte=n, end_byte=n + 1)
        for n in range(100)
    )  # 20 GPU-hours in 100 shards: 12 minutes of a slot's each
    lifecycle.start_hold(flexible, online_slots)
    due = timezone.now() + timedelta(hours=2)
    job = _checked(organisation, gpus="2", hours="1", deadline=due.isoformat())
    assert job.deadline_feasible is True, "the flexible job gives its slots back at its next shard boundary"
    soonest = timezone.now() + timedelta(minutes=5)
    assert soonest <= job.expected_start <= soonest + timedelta(minutes=2), "half a shard from now, not at once"


def _running(organisation, slots, hours: int, shards: int) -> Job:
    """A flexible job of 2 GPUs for `hours` in `shards` shards, held on `slots`."""
    job = make_job(organisation, State.QUEUED, gpus=2, hours=hours, request=Job.Request.FLEXIBLE)
    Shard.objects.bulk_create(
        Shard(job=job, index=n, first_record=n + 1, record_count=1, first_line=n + 2, start_byte=n, end_byte=n + 1)
        for n in range(shards)
    )
    lifecycle.start_hold(job, slots)
    return job


def test_a_deadline_job_is_expected_on_the_slots_the_pass_asks_back_the_last_in_the_order_first(
    organisation, online_slots
):
    _running(organisation, online_slots[:2], hours=1, shards=20)  # less work left: first; shards of 6 minutes
    _running(organisation, online_slots[2:], hours=5, shards=10)  # last in the order; shards of an hour
    due = timezone.now() + timedelta(hours=3)
    job = _checked(organisation, gpus="2", hours="1", deadline=due.isoformat())
    assert job.deadline_feasible is True
    soonest = timezone.now() + timedelta(minutes=29)
    assert soonest <= job.expected_start <= soonest + timedelta(minutes=2), "the long job's slots, asked first"


def test_a_flexible_job_is_expected_to_finish_sooner_when_wider(organisation, online_slots):
    narrow = _checked(organisation, gpus="1", hours="2", kind="flexible")
    wide = _checked(organisation, gpus="1", hours="2", kind="flexible", max_gpus="4")
    assert narrow.expected_finish - narrow.expected_start == timedelta(hours=2)
    assert wide.expected_finish - wide.expected_start == timedelta(minutes=30), "2 GPU-hours on 4 slots"


def test_a_job_past_the_monthly_spend_cap_is_refused_with_the_figures(organisation, online_slots, rate_card):
    Organisation.objects.filter(pk=organisation.pk).update(monthly_spend_cap=Decimal("20"))
    organisation.refresh_from_db()
    make_job(organisation, State.QUEUED, gpus=2, hours=2)  # 4 GPU-hours committed at 3.60: 14.40
    [(field, message)] = _refusals(organisation, gpus="1", hours="2")
    assert field == "hours"
    assert message == (
        f"This job's budget, 7.20 USD, would take {organisation.name}'s spend this month to 21.60 USD, past its "
        "cap of 20.00 USD (14.40 USD charged or committed so far); ask for less, or ask an operator."
    )
    assert _checked(organisation, gpus="1", hours="1.5").hours == Decimal("1.5"), "5.40 fits under the cap"


def test_submit_says_whether_the_deadline_can_be_met(organisation, online_slots):
    busy = make_job(organisation, State.QUEUED, gpus=4, hours=5)
    lifecycle.start_hold(busy, online_slots)
    due = timezone.now() + timedelta(hours=2)
    late = services.submit_job(organisation, None, _spec(gpus="2", hours="1", deadline=due.isoformat()))
    said = outlook_line(late)
    assert said.startswith(f"It cannot finish before its deadline, {due:%Y-%m-%d %H:%M} UTC: the earliest is ")
    assert said.endswith("It runs as best effort; cancel it and widen it (--max-gpus), or drop the deadline.")
    lifecycle.release(busy)
    Job.objects.filter(pk=busy.pk).update(state=State.SUCCEEDED)
    soon = services.submit_job(organisation, None, _spec(gpus="2", hours="1", deadline=due.isoformat()))
    assert outlook_line(soon).endswith(f"before its deadline, {due:%Y-%m-%d %H:%M} UTC.")
