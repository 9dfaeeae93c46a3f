"""The order the scheduler gives slots in (issues 31 and 41): deadlines first (EDF), then least work left,
each job's weighed by its organisation's decayed GPU-hours over its weight (jobs.scheduling.policy); quotas;
and flexible requests, which start on the slots free now, grow into free ones and give slots back at shard
boundaries to a job ahead of them in the order."""

from datetime import UTC, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.metering import price_holds
from jobs import lifecycle, scheduling
from jobs.models import Allocation, Gpu, Job, Shard, State, UsageHour
from jobs.scheduling import policy, schedule
from jobs.workers import node
from portal.models import Organisation
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def _queued(organisation, gpus: int = 1, hours: float = 1, **fields) -> Job:
    return make_job(organisation, State.QUEUED, gpus=gpus, hours=hours, **fields)


def _flexible(organisation, gpus: int, hours: float = 1, shards: int = 8, **fields) -> Job:
    job = _queued(organisation, gpus, hours, request=Job.Request.FLEXIBLE, **fields)
    Shard.objects.bulk_create(
        Shard(job=job, index=n, first_record=n * 10 + 1, record_count=10, first_line=n * 10 + 2,
              start_byte=n * 100, end_byte=n * 100 + 100)
        for n in range(shards)
    )  # fmt: skip
    return job


def _held(job: Job) -> int:
    return Allocation.objects.filter(job=job, held_to=None).count()


def _measured(job: Job) -> None:
    """Its first shard done, in 10 s: the rate of its shards is known."""
    _done(job, 1, seconds=10)


def test_a_job_due_soon_starts_before_jobs_queued_before_it(organisation, online_slots):
    first = _queued(organisation, gpus=4)
    due = _queued(organisation, gpus=4, deadline=timezone.now() + timedelta(hours=3))
    assert schedule() == [due.pk], "earliest deadline first"
    first.refresh_from_db()
    assert first.state == State.QUEUED


def test_between_deadlines_the_earliest_goes_first(organisation, online_slots):
    later = _queued(organisation, gpus=3, deadline=timezone.now() + timedelta(hours=5))
    sooner = _queued(organisation, gpus=3, deadline=timezone.now() + timedelta(hours=2))
    assert schedule() == [sooner.pk]
    later.refresh_from_db()
    assert later.state == State.QUEUED


def test_a_deadline_it_could_not_meet_at_submit_runs_as_best_effort(organisation, online_slots):
    light = _queued(organisation, gpus=4, hours=0.5)
    hopeless = _queued(
        organisation, gpus=4, hours=2, deadline=timezone.now() + timedelta(hours=3), deadline_feasible=False
    )
    assert schedule() == [light.pk], "no protection: it is ordered as a job without a deadline"
    assert Job.objects.get(pk=hopeless.pk).state == State.QUEUED


def test_within_an_organisation_least_work_left_goes_first(organisation, online_slots):
    big = _queued(organisation, gpus=4, hours=3)
    small = _queued(organisation, gpus=4, hours=1)
    assert schedule() == [small.pk]
    assert Job.objects.get(pk=big.pk).state == State.QUEUED


def _used(organisation, gpus: int, hours: float, ago: float, slots) -> None:
    """`organisation` held `gpus` slots for `hours`, ended `ago` hours since."""
    job = make_job(organisation, State.SUCCEEDED, gpus=gpus, hours=hours)
    end = timezone.now() - timedelta(hours=ago)
    Allocation.objects.bulk_create(
        Allocation(job=job, gpu=slot, held_from=end - timedelta(hours=hours), held_to=end) for slot in slots[:gpus]
    )
    UsageHour.add(Allocation.objects.filter(job=job))


def _rolled_up(organisation) -> dict:
    """The organisation's roll-up: seconds held, by hour."""
    rows = UsageHour.objects.filter(organisation=organisation).values_list("hour", "seconds")
    return {hour: round(seconds) for hour, seconds in rows}


def test_ended_holds_join_their_organisations_hour_where_they_end(organisation, other_organisation, online_slots):
    """Released, lost late with their node, or given back: each ended hold's seconds are added to its
    organisation's hour (the hour it ended in, UTC) in the roll-up the fair share reads."""
    hour = (timezone.now() - timedelta(hours=3)).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    start = hour + timedelta(minutes=10)
    mine, theirs = _queued(organisation, gpus=2), _queued(other_organisation, gpus=1)
    assert sorted(schedule()) == sorted([mine.pk, theirs.pk])
    Allocation.objects.update(held_from=start)
    assert lifecycle.release(mine, at=start + timedelta(minutes=30))
    lost = list(Allocation.objects.filter(job=theirs))
    assert lifecycle.lose_slots(theirs, lost, at=start + timedelta(minutes=70), node="fake-node") == 1
    assert _rolled_up(organisation) == {hour: 2 * 1800}
    assert _rolled_up(other_organisation) == {hour + timedelta(hours=1): 4200}, "the hour it ended in, not now"

    again = _queued(organisation, gpus=1)
    assert again.pk in schedule(), "(theirs, back in the queue, too)"
    Allocation.objects.filter(job=again).update(held_from=start)
    assert lifecycle.release(again, at=start + timedelta(minutes=40))
    assert _rolled_up(organisation) == {hour: 2 * 1800 + 2400}, "added to the hour's row"

    flexible = _flexible(organisation, gpus=2, hours=2)
    assert schedule() == [flexible.pk]
    given = Allocation.objects.filter(job=flexible).first()
    Allocation.objects.filter(pk=given.pk).update(give_back=True, held_from=timezone.now() - timedelta(minutes=10))
    assert lifecycle.give_back(given.pk)
    ended = Allocation.objects.get(pk=given.pk).held_to.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    assert 599 <= _rolled_up(organisation)[ended] <= 660


def test_the_organisation_that_held_least_lately_goes_first(organisation, online_slots):
    other = Organisation.objects.create(name="Other", slug="other")
    _used(organisation, 4, 10, ago=1, slots=online_slots)
    mine = _queued(organisation, gpus=4, hours=0.5)
    theirs = _queued(other, gpus=4, hours=2)
    assert schedule() == [theirs.pk], "fair share before least work"
    assert Job.objects.get(pk=mine.pk).state == State.QUEUED


def test_a_partners_many_jobs_queue_behind_each_other_not_in_front_of_anothers(organisation, online_slots):
    other = Organisation.objects.create(name="Other", slug="other")
    mine = [_queued(organisation, gpus=4, hours=1) for _ in range(3)]
    theirs = _queued(other, gpus=4, hours=1)
    assert schedule() == [mine[0].pk], "the first of each partner's ties by arrival"
    lifecycle.release(mine[0], at=timezone.now() + timedelta(hours=1))  # 4 GPU-hours held
    Job.objects.filter(pk=mine[0].pk).update(state=State.SUCCEEDED)
    assert schedule() == [theirs.pk], "the other partner's first job before my second: fair, not first come"


def test_a_short_job_of_a_partner_that_held_a_little_goes_before_a_long_one_of_a_partner_that_held_none(
    organisation, online_slots
):
    other = Organisation.objects.create(name="Other", slug="other")
    _used(organisation, 1, 2, ago=0, slots=online_slots)
    long = _queued(other, gpus=4, hours=10)
    short = _queued(organisation, gpus=4, hours=0.25)
    assert schedule() == [short.pk], "2 GPU-hours held and 1 to come, before 40 to come"
    assert Job.objects.get(pk=long.pk).state == State.QUEUED


def test_between_partners_that_both_held_lately_a_short_job_goes_before_a_long_one(organisation, online_slots):
    other = Organisation.objects.create(name="Other", slug="other")
    _used(organisation, 4, 10, ago=0, slots=online_slots)  # 40 GPU-hours
    _used(other, 4, 5, ago=0, slots=online_slots)  # 20
    short = _queued(organisation, gpus=4, hours=0.125)
    long = _queued(other, gpus=4, hours=2.5)
    # Weighed, 0.5 GPU-hours times (40 + 3) against 10 times (20 + 3): the heavier partner's short job goes
    # first, where fair queuing put it behind (40.5 against 30 GPU-hours).
    assert schedule() == [short.pk]
    assert Job.objects.get(pk=long.pk).state == State.QUEUED


def test_usage_decays_and_weights_count(organisation, online_slots, settings):
    settings.E31_FAIR_SHARE_HALF_LIFE_HOURS = 1
    other = Organisation.objects.create(name="Other", slug="other")
    _used(organisation, 4, 10, ago=20, slots=online_slots)  # 40 GPU-hours, 20 half-lives ago: about nothing
    _used(other, 1, 1, ago=0, slots=online_slots)
    mine = _queued(organisation, gpus=4, hours=0.5)
    _queued(other, gpus=4, hours=0.5)
    assert schedule() == [mine.pk], "old hours weigh next to nothing: 2 GPU-hours to come against 1 held and 2"
    Allocation.objects.filter(job=mine).delete()
    Job.objects.filter(pk=mine.pk).update(state=State.SUCCEEDED)
    _used(organisation, 1, 1, ago=0, slots=online_slots)  # both held 1 GPU-hour just now
    Organisation.objects.filter(pk=organisation.pk).update(share_weight=Decimal(4))
    again = _queued(organisation, gpus=4, hours=1)
    assert schedule() == [again.pk], "four times the weight: twice the other's work left goes first"


def test_a_quota_holds_its_organisation_back_and_no_other(organisation, online_slots):
    Organisation.objects.filter(pk=organisation.pk).update(max_slots_held=2)
    other = Organisation.objects.create(name="Other", slug="other")
    first = _queued(organisation, gpus=2, hours=0.5)
    over = _queued(organisation, gpus=1, hours=2)
    theirs = _queued(other, gpus=2, hours=1)
    assert sorted(schedule()) == sorted([first.pk, theirs.pk])
    assert Job.objects.get(pk=over.pk).state == State.QUEUED, "its organisation holds its 2"
    assert _held(first) == 2


def test_a_quota_narrows_a_flexible_job(organisation, online_slots):
    Organisation.objects.filter(pk=organisation.pk).update(max_slots_held=3)
    wide = _flexible(organisation, gpus=4)
    assert schedule() == [wide.pk]
    assert _held(wide) == 3


def test_a_flexible_job_starts_on_the_slots_free_now_and_grows_into_more(organisation, online_slots):
    busy = _queued(organisation, gpus=3, hours=0.25)
    assert schedule() == [busy.pk]
    flexible = _flexible(organisation, gpus=4, hours=1)
    assert schedule() == [flexible.pk], "a fixed request of 4 would wait; this starts on the one free"
    assert _held(flexible) == 1
    flexible.refresh_from_db()
    started = flexible.started_at
    assert abs((flexible.budget_ends_at - (started + timedelta(hours=4))).total_seconds()) <= 2, "4 GPU-hours on 1"
    lifecycle.release(busy)
    Job.objects.filter(pk=busy.pk).update(state=State.SUCCEEDED)
    assert schedule() == [], "nothing new starts"
    assert _held(flexible) == 4, "it grew into the three freed"
    flexible.refresh_from_db()
    assert flexible.budget_ends_at < started + timedelta(hours=2), "its budget is spent sooner, four at a time"


def test_it_grows_no_wider_than_its_cap_nor_its_shards_left(organisation, online_slots):
    capped = _flexible(organisation, gpus=1, max_gpus=2, shards=32)
    assert schedule() == [capped.pk]
    _measured(capped)
    assert schedule() == []
    assert _held(capped) == 2
    few = _flexible(organisation, gpus=4, shards=1)
    assert schedule() == [few.pk]
    assert _held(few) == 1, "one shard to run: one slot"


def test_a_flexible_job_gives_slots_back_to_a_deadline_job(organisation, online_slots):
    flexible = _flexible(organisation, gpus=4, hours=2)
    assert schedule() == [flexible.pk]
    assert _held(flexible) == 4
    due = _queued(organisation, gpus=3, deadline=timezone.now() + timedelta(hours=2))
    assert schedule() == []
    asked = list(Allocation.objects.filter(job=flexible, held_to=None, give_back=True))
    assert len(asked) == 3, "three slots asked back, at their next shard boundaries"
    assert schedule() == [] and Allocation.objects.filter(give_back=True).count() == 3, "asked once, not again"
    for allocation in asked[:2]:
        assert lifecycle.give_back(allocation.pk)
    assert schedule() == [], "two of three free: they are kept for it"
    assert _held(flexible) == 2
    assert lifecycle.give_back(asked[2].pk)
    assert schedule() == [due.pk]
    assert _held(due) == 3 and _held(flexible) == 1
    assert not lifecycle.give_back(asked[2].pk), "a hold ends once"


def test_its_last_slot_given_back_puts_it_back_in_the_queue_with_the_meter_off(organisation, online_slots):
    flexible = _flexible(organisation, gpus=1, hours=2)
    assert schedule() == [flexible.pk]
    [hold] = Allocation.objects.filter(job=flexible)
    Allocation.objects.filter(pk=hold.pk).update(give_back=True)
    assert lifecycle.give_back(hold.pk)
    flexible.refresh_from_db()
    assert flexible.state == State.QUEUED and _held(flexible) == 0
    assert flexible.events.last().message.endswith("its last; back in the queue")


def test_an_idle_slot_goes_back_but_never_the_last(organisation, online_slots):
    flexible = _flexible(organisation, gpus=2, hours=1, shards=2)
    assert schedule() == [flexible.pk]
    first, second = Allocation.objects.filter(job=flexible)
    Shard.objects.filter(job=flexible).update(status=Shard.Status.RUNNING)
    assert lifecycle.give_back(first.pk, idle=True), "no shard left for it while the other runs the last"
    assert not lifecycle.give_back(second.pk, idle=True), "the last slot stays for the shards it may take back"
    assert not lifecycle.give_back(second.pk), "not asked back"
    fixed = _queued(organisation, gpus=1)
    assert schedule() == [fixed.pk]
    [hold] = Allocation.objects.filter(job=fixed)
    assert not lifecycle.give_back(hold.pk, idle=True), "a fixed request keeps its slots"


def test_a_flexible_bill_never_passes_its_budget(organisation, online_slots):
    """Widths changed many times: the holds, ended at its limit, add up to its budget at most."""
    flexible = _flexible(organisation, gpus=2, hours=0.01, shards=50)  # 72 GPU-seconds
    assert schedule() == [flexible.pk]
    start = timezone.now() - timedelta(seconds=30)
    Allocation.objects.filter(job=flexible).update(held_from=start)
    lifecycle._rebudget([flexible.pk])
    holds = list(Allocation.objects.filter(job=flexible))
    Allocation.objects.filter(pk__in=[h.pk for h in holds[1:]]).update(held_to=start + timedelta(seconds=7.3))
    lifecycle._rebudget([flexible.pk])
    flexible.refresh_from_db()
    lifecycle.release(flexible, at=timezone.now() + timedelta(hours=1))
    ended = [(a.held_from, a.held_to) for a in Allocation.objects.filter(job=flexible)]
    assert price_holds(2, ended).gpu_hours <= Decimal("0.02")
    assert max(end for _, end in ended) == flexible.time_limit_at()


def test_an_operator_pins_a_waiting_flexible_job_to_fixed(organisation, online_slots):
    waiting = _flexible(organisation, gpus=3, max_gpus=4)
    assert lifecycle.pin_fixed(waiting)
    waiting.refresh_from_db()
    assert (waiting.request, waiting.max_gpus, waiting.width_cap) == (Job.Request.FIXED, None, 3)
    assert waiting.events.last().message == "pinned to a fixed request by the operators"
    assert not lifecycle.pin_fixed(waiting), "fixed already"
    running = _flexible(organisation, gpus=1)
    Job.objects.filter(pk=waiting.pk).update(state=State.CANCELLED)
    assert schedule() == [running.pk]
    assert not lifecycle.pin_fixed(running), "it holds slots: its width is the scheduler's"


def test_a_slot_given_back_is_not_rejoined_by_its_node(organisation, online_slots):
    flexible = _flexible(organisation, gpus=4, hours=2)
    assert schedule() == [flexible.pk]
    _queued(organisation, gpus=1, deadline=timezone.now() + timedelta(hours=2))
    assert schedule() == []
    [asked] = Allocation.objects.filter(job=flexible, give_back=True)
    assert lifecycle.give_back(asked.pk)
    assert node.serve_held_slots("fake-node", {slot.index for slot in online_slots}) == [], "lost slots rejoin"
    assert _held(flexible) == 3


def test_a_deadline_job_takes_the_width_that_keeps_it_on_time_and_the_rest_go_by_least_work(organisation, online_slots):
    due = _flexible(organisation, gpus=1, hours=1, max_gpus=4, deadline=timezone.now() + timedelta(hours=2))
    small = _flexible(organisation, gpus=1, hours=0.5, max_gpus=4, shards=32)
    assert sorted(schedule()) == sorted([due.pk, small.pk])
    _measured(small)
    assert schedule() == []
    assert (_held(due), _held(small)) == (1, 3), "one slot keeps it on time; the job with less work takes the rest"


@pytest.mark.parametrize(("gpus", "shards", "width"), [(1, 3, 1), (1, 12, 2), (1, 20, 3), (2, 4, 2), (1, 40, 4)])
def test_a_flexible_job_runs_wider_than_asked_only_with_shards_enough_for_each_slot(
    organisation, online_slots, gpus, shards, width
):
    """A slot's start on a job is billed to its budget: beyond its request's width a job takes a slot only once
    a shard done shows what its work is, and while each of its slots has SHARDS_PER_EXTRA_SLOT (8) shards to
    take (those left after the one done), never more slots than shards."""
    flexible = _flexible(organisation, gpus=gpus, hours=1, max_gpus=4, shards=shards)
    assert schedule() == [flexible.pk]
    assert _held(flexible) == gpus, "before a shard is done, its request's width"
    _measured(flexible)
    assert schedule() == []
    assert _held(flexible) == width


def test_a_deadline_keeps_the_width_that_keeps_it_on_time_with_few_shards(organisation, online_slots):
    due = _flexible(
        organisation, gpus=1, hours=1, max_gpus=4, shards=4, deadline=timezone.now() + timedelta(minutes=30)
    )
    assert schedule() == [due.pk]
    assert _held(due) == 3, "3,600 GPU-seconds by 3/4 of 30 minutes: three slots, though its shards would give one"


def test_a_running_flexible_job_grows_only_as_far_as_its_shards_left_make_worth_it(organisation, online_slots):
    fixed = _queued(organisation, gpus=3, hours=0.1)
    assert schedule() == [fixed.pk]
    flexible = _flexible(organisation, gpus=1, hours=1, max_gpus=4, shards=16)
    assert schedule() == [flexible.pk]
    assert _held(flexible) == 1
    lifecycle.release(fixed)
    Job.objects.filter(pk=fixed.pk).update(state=State.SUCCEEDED)
    assert schedule() == []
    assert _held(flexible) == 1, "no shard done yet: its request's width"
    _measured(flexible)
    assert schedule() == []
    assert _held(flexible) == 2, "15 shards left: two slots of 8 at most each, not the 4 free"


def _resizing(organisation) -> tuple[Job, list[Allocation], Job]:
    """A flexible job on the four slots, three asked back for a deadline job, one of them given back: mid-resize."""
    flexible = _flexible(organisation, gpus=4, hours=2)
    assert schedule() == [flexible.pk]
    due = _queued(organisation, gpus=3, deadline=timezone.now() + timedelta(hours=2))
    assert schedule() == []
    asked = list(Allocation.objects.filter(job=flexible, held_to=None, give_back=True))
    assert len(asked) == 3 and lifecycle.give_back(asked[0].pk)
    for index, hold in enumerate(Allocation.objects.filter(job=flexible, held_to=None)):  # a shard on each slot held
        Shard.objects.filter(job=flexible, index=index).update(status=Shard.Status.RUNNING, claim="c", gpu=hold.gpu)
    return flexible, asked, due


def _unserved(job: Job, until) -> list[Allocation]:
    """Its holds that ended after `until` or are still open: what would be billed past it."""
    return [a for a in Allocation.objects.filter(job=job) if a.held_to is None or a.held_to > until]


def test_a_flexible_job_cancelled_mid_resize_ends_every_hold_once(organisation, online_slots):
    flexible, asked, due = _resizing(organisation)
    assert lifecycle.cancel(flexible)
    cancelled = timezone.now()
    assert _held(flexible) == 0 and not _unserved(flexible, cancelled), "nothing held or billed past the cancel"
    assert not lifecycle.give_back(asked[1].pk), "its slot's next shard boundary finds the hold ended"
    assert schedule() == [due.pk], "the slots it was asked for, and the rest, are free"
    assert Allocation.objects.filter(job=flexible).count() == 4, "four holds, each ended once"


def test_a_flexible_job_whose_node_dies_mid_resize_loses_nothing_and_is_billed_to_its_last_heartbeat(
    organisation, online_slots
):
    flexible, _, due = _resizing(organisation)
    seen = timezone.now()
    Gpu.objects.update(last_seen=seen - timedelta(minutes=5))
    node.take_offline(Allocation.objects.filter(gpu__node__name="fake-node"), timezone.now(), at=seen)
    flexible.refresh_from_db()
    assert flexible.state == State.QUEUED, "no slot left: back in the queue, the meter off"
    assert _held(flexible) == 0 and not _unserved(flexible, seen), "billed to the node's last heartbeat"
    shards = Shard.objects.filter(job=flexible)
    assert not shards.filter(status=Shard.Status.RUNNING).exists(), "the shards it ran go back to be taken again"
    assert shards.count() == 8 and not shards.filter(status=Shard.Status.DONE).exists(), "none lost, none done twice"
    Gpu.objects.update(last_seen=timezone.now())
    assert schedule() == [due.pk, flexible.pk], "the node back: the deadline first, the flexible one on the rest"
    assert (_held(due), _held(flexible)) == (3, 1)


def test_a_flexible_job_back_in_the_queue_and_put_on_hold_is_passed_by(organisation, online_slots):
    flexible = _flexible(organisation, gpus=2, hours=1)
    assert schedule() == [flexible.pk]
    for hold in Allocation.objects.filter(job=flexible):
        Allocation.objects.filter(pk=hold.pk).update(give_back=True)
        lifecycle.give_back(hold.pk)
    assert Job.objects.get(pk=flexible.pk).state == State.QUEUED
    assert lifecycle.put_on_hold(flexible, "quota review")
    other = _queued(organisation, gpus=1)
    assert schedule() == [other.pk], "passed by while on hold"
    assert _held(flexible) == 0


def _running(organisation, slots, gpus: int = 1, hours: float = 2, shards: int = 20, **fields) -> Job:
    """A flexible job of `shards` shards of 10 records, held on `slots`."""
    job = _flexible(organisation, gpus=gpus, hours=hours, shards=shards, max_gpus=4, **fields)
    assert lifecycle.start_hold(job, slots)
    return Job.objects.get(pk=job.pk)


def _done(job: Job, shards: int, seconds: float) -> None:
    """Its first `shards` shards done, each in `seconds`, ending now."""
    end = timezone.now()
    for index in range(shards):
        start = end - timedelta(seconds=seconds * (shards - index))
        Shard.objects.filter(job=job, index=index).update(
            status=Shard.Status.DONE, started_at=start, finished_at=start + timedelta(seconds=seconds)
        )


def _on_time(job: Job) -> int:
    """The width the scheduler keeps the running job at to be on time: what it holds and what it needs more."""
    now = timezone.now()
    claim = scheduling._Claims(now, scheduling._standing(now)).flexible[job.pk]
    return claim.held + claim.need


def test_a_running_deadline_job_is_sized_from_the_rate_its_shards_ran_at(organisation, online_slots):
    """2 GPU-hours asked for 20 shards: 360 s each by the request; the shards done took 60 s each."""
    job = _running(organisation, online_slots[:1], deadline=timezone.now() + timedelta(minutes=30))
    assert _on_time(job) == 4, "before a shard is done, from the request: 20 shards of 360 s in 3/4 of 30 minutes"
    _done(job, 4, seconds=60)
    assert _on_time(job) == 1, "16 shards of 60 s fit on the slot it holds"


def test_a_slot_first_ends_the_shard_it_is_in_and_counts_only_whole_shards_by_the_deadline():
    row = scheduling._Queued(1, 1, 1, Decimal(1), timedelta(), "clean-table", timezone.now(), True, 0.0,
                             Job.Request.FLEXIBLE, 8)  # fmt: skip
    due = row.deadline + timedelta(minutes=40)
    assert policy.on_time_width(row._replace(deadline=due), 1800, row.deadline) == 1, "30 minutes of work in 3/4 of 40"
    assert policy.on_time_width(row._replace(deadline=due), 1800, row.deadline, shard=600) == 2, (
        "3 shards of 10 minutes in 30: each slot ends the one it is in, then has time for two more"
    )
    assert policy.on_time_width(row._replace(deadline=due), 1800, row.deadline, shard=1800) == 8, "none fits: its cap"


@pytest.mark.parametrize(("hours", "width"), [(0.63, 1), (2, 4)])
def test_a_running_job_is_widened_only_as_far_as_its_budget_pays_for_each_slots_start(
    organisation, online_slots, hours, width
):
    """40 shards that took 60 s each: 36 left are 2,160 s of work. 0.63 hours (2,268 s) leave no shard's
    worth for a slot's start; 2 hours leave plenty."""
    job = _running(organisation, online_slots[:1], hours=hours, shards=40)
    _done(job, 4, seconds=60)
    assert schedule() == []
    assert _held(job) == width


def test_a_deadline_job_that_would_need_more_slots_than_the_fleet_has_takes_them_all(organisation, online_slots):
    due = _flexible(organisation, gpus=4, hours=4, max_gpus=8, deadline=timezone.now() + timedelta(hours=2))
    _flexible(organisation, gpus=1, hours=0.1, max_gpus=4, shards=32)
    assert schedule() == [due.pk], "16 GPU-hours in 2 hours want 8 slots; the fleet's 4 are the most it can have"
    assert _held(due) == 4, "in the deadlines' round, before the job with less work left"


def test_a_flexible_job_below_its_request_takes_a_slot_again_for_a_shard_staged_since(organisation, online_slots):
    """A streaming job's slot that found nothing staged gave its hold back: the next shard staged wants it again,
    even one shard, up to the request's width (jobs.staging.streaming sends the pass)."""
    streamed = _flexible(organisation, gpus=2, hours=1, shards=2, streaming=True, stream_ready=True)
    assert schedule() == [streamed.pk]
    first, _ = Allocation.objects.filter(job=streamed)
    Shard.objects.filter(job=streamed).update(status=Shard.Status.RUNNING)
    assert lifecycle.give_back(first.pk, idle=True), "no shard staged for it yet"
    assert schedule() == [] and _held(streamed) == 1, "nothing staged for a second slot"
    Shard.objects.create(
        job=streamed, index=2, first_record=21, record_count=10, first_line=22, start_byte=200, end_byte=300
    )
    assert schedule() == []
    assert _held(streamed) == 2, "one shard staged since, and a slot of its request free for it"


@pytest.mark.parametrize("last", [Shard.Status.DONE, Shard.Status.RUNNING], ids=["all-done", "one-running"])
def test_a_job_whose_last_shard_is_done_as_its_limit_comes_is_finished_not_timed_out(organisation, online_slots, last):
    """Its last shard done in the second its budget ran out: its output is whole, so it is finished, its hold
    ended at the limit; with a shard still running it times out, keeping what finished."""
    job = _flexible(organisation, gpus=1, hours=1, shards=2)
    assert schedule() == [job.pk]
    started = timezone.now() - timedelta(hours=1, seconds=30)
    Job.objects.filter(pk=job.pk).update(started_at=started, budget_ends_at=started + timedelta(hours=1))
    Allocation.objects.filter(job=job).update(held_from=started)
    Shard.objects.filter(job=job, index=0).update(status=Shard.Status.DONE)
    Shard.objects.filter(job=job, index=1).update(status=last)
    job.refresh_from_db()
    assert job.time_limit_passed()
    assert lifecycle.time_out(job) is (last == Shard.Status.RUNNING)
    job.refresh_from_db()
    assert job.state == (State.FINISHING if last == Shard.Status.DONE else State.TIMED_OUT)
    [hold] = Allocation.objects.filter(job=job)
    assert hold.held_to == job.time_limit_at(), "the meter stops at the limit either way"
