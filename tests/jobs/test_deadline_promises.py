"""A deadline told at submit it could be met, checked again after each pass (issue 41, item 4): a job told "yes"
whose expected finish moved past its deadline is told at once, once, with why: a job with an earlier deadline
submitted after it, GPUs gone offline, shards slower than asked. The jobs never told "yes", those still on
time, and those told already are left alone."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import lifecycle, queue_figures, tasks
from jobs.models import AtRisk, Gpu, Job, JobEvent, Shard, State
from jobs.scheduling import promises
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def _promised(organisation, gpus: int, hours: float, due_in: timedelta, **fields) -> Job:
    """A queued fixed job told at submit that its deadline, `due_in` from now, can be met."""
    deadline = timezone.now() + due_in
    return make_job(
        organisation, State.QUEUED, gpus=gpus, hours=hours, **fields, deadline=deadline, deadline_feasible=True
    )


def _lines(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).exclude(message="").values_list("message", flat=True))


def test_a_job_with_an_earlier_deadline_arriving_later_tells_the_first_at_once(organisation, online_slots):
    first = _promised(organisation, gpus=4, hours=1, due_in=timedelta(minutes=90))
    assert promises.check() == [], "alone it starts now and ends in an hour"
    later = _promised(organisation, gpus=4, hours=1, due_in=timedelta(minutes=80))
    assert promises.check() == [first.pk], "the later one goes first, earliest deadline first: the first ends in 2 h"
    first.refresh_from_db()
    assert first.deadline_at_risk_reason == AtRisk.EARLIER_DEADLINE
    assert first.deadline_at_risk_finish > first.deadline
    assert first.deadline_at_risk == (
        f"Your deadline of {first.deadline:%Y-%m-%d %H:%M} UTC can no longer be met: a job with an earlier deadline, "
        f"submitted after it, takes the GPUs first. Expected finish {first.deadline_at_risk_finish:%Y-%m-%d %H:%M} UTC."
    )
    [line] = _lines(first)
    assert line.startswith("its deadline can no longer be met: a job with an earlier deadline")
    later.refresh_from_db()
    assert later.deadline_at_risk_since is None, "the later one is on time"
    assert promises.check() == [], "told once, not at every pass"
    assert len(_lines(first)) == 1


def test_slots_going_offline_tell_a_waiting_job_fewer_gpus_free_up_in_time(organisation, online_slots):
    busy = make_job(organisation, State.QUEUED, gpus=2, hours=1)
    lifecycle.start_hold(busy, online_slots[:2])
    promised = _promised(organisation, gpus=2, hours=1, due_in=timedelta(minutes=90))
    assert promises.check() == [], "two slots are free: it starts now"
    Gpu.objects.filter(pk__in=[slot.pk for slot in online_slots[2:]]).update(last_seen=None)
    now = timezone.now()
    assert promises.check(now) == [], "it waits for the busy job's hold to end, in an hour: a node restarting?"
    assert promises.check(now + timedelta(seconds=30)) == []
    assert promises.check(now + promises.SHORT_OF_GPUS_FOR) == [promised.pk], "not back within a minute"
    promised.refresh_from_db()
    assert promised.deadline_at_risk_reason == AtRisk.FEWER_GPUS


def test_slots_back_before_a_minute_tell_nothing_and_the_minute_starts_again(organisation, online_slots):
    busy = make_job(organisation, State.QUEUED, gpus=2, hours=1)
    lifecycle.start_hold(busy, online_slots[:2])
    promised = _promised(organisation, gpus=2, hours=1, due_in=timedelta(minutes=90))
    restarting = Gpu.objects.filter(pk__in=[slot.pk for slot in online_slots[2:]])
    seen = restarting.first().last_seen
    restarting.update(last_seen=None)
    now = timezone.now()
    assert promises.check(now) == [], "short of GPUs from now"
    restarting.update(last_seen=seen)
    assert promises.check(now + timedelta(seconds=30)) == [], "back: on time"
    restarting.update(last_seen=None)
    assert promises.check(now + promises.SHORT_OF_GPUS_FOR) == [], "gone again: a minute from now"
    assert promises.check(now + 2 * promises.SHORT_OF_GPUS_FOR) == [promised.pk]


def _running(organisation, slots, done: int, minutes_held: int, due_in: timedelta, **fields) -> Job:
    """A job told "yes" (fixed, unless `fields` say otherwise), running on `slots` for `minutes_held`, `done` of its
    ten shards of 100 records done and 10 records of the next."""
    job = _promised(organisation, gpus=len(slots), hours=2, due_in=due_in, records_total=1000, **fields)
    Shard.objects.bulk_create(
        Shard(
            job=job, index=n, first_record=1 + 100 * n, record_count=100, first_line=2, start_byte=n, end_byte=n + 1,
            status=Shard.Status.DONE if n < done else Shard.Status.PENDING,
        )
        for n in range(10)
    )  # fmt: skip
    assert lifecycle.start_hold(job, slots)
    started = timezone.now() - timedelta(minutes=minutes_held)
    Job.objects.filter(pk=job.pk).update(started_at=started)
    job.allocations.update(held_from=started)
    Shard.objects.filter(job=job, index=done).update(status=Shard.Status.RUNNING, records_done=10)
    return job


def test_a_running_job_whose_shards_run_slower_than_asked_is_told(organisation, online_slots):
    slow = _running(organisation, online_slots[:1], done=1, minutes_held=30, due_in=timedelta(hours=1))
    on_pace = _running(organisation, online_slots[1:2], done=5, minutes_held=30, due_in=timedelta(hours=1))
    starting = _running(organisation, online_slots[2:3], done=0, minutes_held=30, due_in=timedelta(hours=1))
    assert promises.check() == [slow.pk], "110 records in 30 minutes: 890 more take 4 h"
    slow.refresh_from_db()
    assert (slow.deadline_at_risk_reason, slow.state) == (AtRisk.SLOWER, State.RUNNING)
    assert slow.deadline_at_risk_finish > slow.deadline + timedelta(hours=3)
    assert "its shards run slower than its request allowed for" in _lines(slow)[0]
    untold = Job.objects.filter(pk__in=[on_pace.pk, starting.pk], deadline_at_risk_since=None)
    assert untold.count() == 2, "on pace; or no shard done yet (a model loading), so its speed is not known"


def test_a_flexible_job_running_narrow_is_judged_on_the_slots_it_may_widen_to(organisation, online_slots):
    narrow = _running(
        organisation, online_slots[:1], done=3, minutes_held=30, due_in=timedelta(hours=1),
        request=Job.Request.FLEXIBLE, max_gpus=4,
    )  # fmt: skip
    assert promises.check() == [], "690 records left: 67 minutes on its one slot, 17 on the four it may hold"
    narrow.allocations.update(held_from=timezone.now() - timedelta(hours=2))
    assert promises.check() == [narrow.pk], "slower than that: 67 minutes even on four slots"


def test_only_jobs_told_yes_and_not_told_since_are_told(organisation, online_slots):
    make_job(organisation, State.QUEUED, gpus=4, hours=1, deadline=timezone.now() + timedelta(minutes=30))
    told_no = make_job(
        organisation, State.QUEUED, gpus=4, hours=1, deadline=timezone.now() + timedelta(minutes=90),
        deadline_feasible=False,
    )  # fmt: skip
    no_deadline = make_job(organisation, State.QUEUED, gpus=4, hours=3)
    assert promises.check() == []
    assert not Job.objects.exclude(deadline_at_risk_since=None).exists(), (told_no.pk, no_deadline.pk)


def test_a_job_back_on_time_keeps_its_note_and_is_not_told_again(organisation, online_slots):
    first = _promised(organisation, gpus=4, hours=1, due_in=timedelta(minutes=90))
    later = _promised(organisation, gpus=4, hours=1, due_in=timedelta(minutes=80))
    assert promises.check() == [first.pk]
    lifecycle.cancel(later)
    assert promises.check() == [], "on time again: not told yes, no, yes"
    first.refresh_from_db()
    assert first.deadline_at_risk_since is not None and len(_lines(first)) == 1


def test_the_scheduling_task_tells_after_its_pass(organisation, online_slots):
    busy = make_job(organisation, State.QUEUED, gpus=4, hours=1)
    lifecycle.start_hold(busy, online_slots)
    first = _promised(organisation, gpus=4, hours=1, due_in=timedelta(minutes=135))
    _promised(organisation, gpus=4, hours=1, due_in=timedelta(minutes=130))
    assert tasks.schedule() == [], "every slot is held until the busy job's limit, in an hour"
    first.refresh_from_db()
    assert first.deadline_at_risk_reason == AtRisk.EARLIER_DEADLINE
    queue_figures.changed()
    tasks.schedule()
    assert len(_lines(first)) == 1, "the next check, after the next pass, tells nothing"


def test_a_check_works_out_a_few_waiting_jobs_and_the_next_check_the_next(organisation, online_slots, monkeypatch):
    monkeypatch.setattr(promises, "WAITING_PER_CHECK", 1)
    first = _promised(organisation, gpus=4, hours=1, due_in=timedelta(minutes=130))
    second = _promised(organisation, gpus=4, hours=1, due_in=timedelta(minutes=135))
    _promised(organisation, gpus=4, hours=2, due_in=timedelta(minutes=125))
    assert promises.check() == [], "the one due first, which is on time"
    assert promises.check() == [first.pk]
    assert promises.check() == [second.pk]
    assert promises.check() == [], "round to the first again: on time, and the others told"
