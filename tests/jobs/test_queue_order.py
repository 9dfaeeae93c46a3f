"""The order the scheduler gives slots in (issue 31): deadlines first (EDF), then fairly between
organisations (decayed GPU-hours over their weights), then least work left; quotas; and flexible
requests, which start on the slots free now, grow into free ones and give slots back at shard
boundaries to a job ahead of them in the order."""

from datetime import UTC, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.metering import price_holds
from jobs import lifecycle
from jobs.models import Allocation, Gpu, Job, Shard, State, UsageHour
from jobs.scheduling import schedule
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
    again = _queued(organisation, gpus=4, hours=2)
    assert schedule() == [again.pk], "four times the weight: a quarter of the other's share"


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
    assert (_held(due), _held(small)) == (1, 3), "one slot keeps it on time; the job with less work takes the rest"


@pytest.mark.parametrize(("gpus", "shards", "width"), [(1, 3, 1), (1, 12, 2), (1, 20, 3), (2, 4, 2), (1, 40, 4)])
def test_a_flexible_job_runs_wider_than_asked_only_with_shards_enough_for_each_slot(
    organisation, online_slots, gpus, shards, width
):
    """A slot's start on a job is billed to its budget: beyond its request's width a job takes a slot only
    while each of its slots has SHARDS_PER_EXTRA_SLOT (8) shards to take, and never more slots than shards."""
    flexible = _flexible(organisation, gpus=gpus, hours=1, max_gpus=4, shards=shards)
    assert schedule() == [flexible.pk]
    assert _held(flexible) == width


def test_a_deadline_keeps_the_width_that_keeps_it_on_time_with_few_shards(organisation, online_slots):
    due = _flexible(
        organisation, gpus=1, hours=1, max_gpus=4, shards=4, deadline=timezone.now() + timedelta(minutes=25)
    )
    assert schedule() == [due.pk]
    assert _held(due) == 3, "3,600 GPU-seconds in 25 minutes: three slots, though its shards alone would give it one"


def test_a_running_flexible_job_grows_only_as_far_as_its_shards_left_make_worth_it(organisation, online_slots):
    fixed = _queued(organisation, gpus=3, hours=0.1)
    assert schedule() == [fixed.pk]
    flexible = _flexible(organisation, gpus=1, hours=1, max_gpus=4, shards=16)
    assert schedule() == [flexible.pk]
    assert _held(flexible) == 1
    lifecycle.release(fixed)
    Job.objects.filter(pk=fixed.pk).update(state=State.SUCCEEDED)
    assert schedule() == []
    assert _held(flexible) == 2, "16 shards left: two slots of 8 each, not the 4 free"


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
