"""The queue's figures, stored for the whole queue at once after a pass: each queued job's place, the
jobs on hold before it and its latest start are those that reading every job before it gives (the
reference: scheduling.queue_position, on_hold_ahead, latest_start), over random queues, holds and
deadlines; a page reads them in one look however deep the job is."""

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs import lifecycle, queue_figures, scheduling
from jobs.facts import JobFacts
from jobs.management.commands.submit import progress_line
from jobs.models import Allocation, Gpu, Job, Node, State
from tests.factories import make_job

pytestmark = pytest.mark.django_db

HOURS = [Decimal(h) for h in ("0.25", "0.5", "1", "2", "3.5")]


def _fleet(draw: random.Random, now) -> list[Gpu]:
    """A node of 1 to 8 slots, some of them offline; the online ones."""
    node = Node.objects.create(name="node", hostname="node", last_seen=now)
    slots = [
        Gpu.objects.create(
            node=node,
            index=index,
            kind=Gpu.Kind.CPU,
            name="CPU slot",
            queue=f"slot.node.{index}",
            last_seen=now if draw.random() < 0.8 else None,
        )
        for index in range(draw.randint(1, 8))
    ]
    return [slot for slot in slots if slot.last_seen]


def _world(draw: random.Random, organisation, now) -> list[Job]:
    """Running jobs holding some of the online slots, and a queue behind them; the queued jobs."""
    online = _fleet(draw, now)
    free = list(online)
    for _ in range(draw.randint(0, 3)):
        held = [free.pop() for _ in range(min(len(free), draw.randint(1, 3)))]
        if not held:
            break
        started = now - timedelta(minutes=draw.randint(0, 150))
        deadline = now + timedelta(minutes=draw.randint(-10, 200)) if draw.random() < 0.3 else None
        running = make_job(
            organisation,
            State.RUNNING,
            gpus=len(held),
            hours=draw.choice(HOURS),
            started_at=started,
            deadline=deadline,
            held_before=timedelta(minutes=draw.choice([0, 0, 20])),
        )
        Allocation.objects.bulk_create(Allocation(job=running, gpu=slot, held_from=started) for slot in held)
    if free and draw.random() < 0.2:  # a slot held by no running job: no later job has a latest start
        finishing = make_job(organisation, State.FINISHING, started_at=now)
        Allocation.objects.create(job=finishing, gpu=free.pop(), held_from=now)
    queued_at = [now - timedelta(minutes=draw.randint(1, 30)) for _ in range(draw.randint(0, 15))]
    return [
        make_job(
            organisation,
            State.QUEUED,
            queued_at=at,  # some at the same moment: then the lower id goes first
            gpus=draw.randint(1, len(online) + 1),
            hours=draw.choice(HOURS),
            held_before=timedelta(minutes=draw.choice([0, 0, 0, 30])),
            deadline=now + timedelta(minutes=draw.randint(-5, 400)) if draw.random() < 0.3 else None,
            on_hold_since=now if draw.random() < 0.2 else None,
        )
        for at in queued_at
    ]


def _empty_world() -> None:
    Allocation.objects.all().delete()
    Job.objects.all().delete()
    Node.objects.all().delete()


def test_the_stored_figures_are_those_of_a_full_count_over_random_queues(organisation):
    draw = random.Random(16)
    for case in range(50):
        now = timezone.now()
        queued = _world(draw, organisation, now)
        queue_figures.changed()
        assert scheduling.refresh_queue_figures(now)

        for job in Job.objects.filter(pk__in=[job.pk for job in queued]):
            stored = queue_figures.read(job)
            reference = (
                scheduling.queue_position(job),
                scheduling.on_hold_ahead(job),
                scheduling.latest_start(job, now),
            )
            assert (stored.place, stored.on_hold_ahead, stored.latest_start) == reference, f"case {case}, job {job.pk}"
        assert not queue_figures.read_many(list(Job.objects.exclude(state=State.QUEUED)))
        _empty_world()


def test_a_change_to_the_queue_has_the_next_pass_work_them_out_again(
    organisation, online_slots, django_capture_on_commit_callbacks
):
    first, second = (make_job(organisation, State.QUEUED, gpus=4) for _ in range(2))
    now = timezone.now()
    assert scheduling.refresh_queue_figures(now), "none stored yet"
    assert not scheduling.refresh_queue_figures(now), "nothing changed since"

    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.put_on_hold(first)
    assert scheduling.refresh_queue_figures(now)
    assert queue_figures.read(Job.objects.get(pk=second.pk)).on_hold_ahead == 1

    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.cancel(first)
    assert scheduling.refresh_queue_figures(now)
    assert queue_figures.read(Job.objects.get(pk=second.pk)).place == 1
    later = now + timedelta(seconds=queue_figures.REFRESH_SECONDS)
    assert scheduling.refresh_queue_figures(later), "latest starts move with the clock"


def test_a_job_queued_since_the_last_pass_is_shown_its_place_all_the_same(organisation, online_slots):
    make_job(organisation, State.QUEUED)
    scheduling.refresh_queue_figures()
    since = make_job(organisation, State.QUEUED)
    assert queue_figures.read(since) is None
    assert JobFacts(since).queue_position == 2
    assert ", number 2 in the queue, starts by " in progress_line(since), "submit --wait says it too"


def test_a_job_deep_in_the_queue_reads_its_figures_as_cheaply_as_one_near_the_head(
    organisation, online_slots, partner_client, django_assert_max_num_queries
):
    now = timezone.now()
    queued = [make_job(organisation, State.QUEUED, gpus=4, queued_at=now + timedelta(seconds=n)) for n in range(200)]
    assert lifecycle.start_hold(make_job(organisation, State.QUEUED, gpus=4), online_slots)
    scheduling.refresh_queue_figures()

    def fragment_queries(job: Job) -> int:
        with django_assert_max_num_queries(30) as captured:
            html = partner_client.get(f"/jobs/{job.pk}/progress/", headers={"HX-Request": "true"}).content.decode()
        assert f"Number {queued.index(job) + 1} in the queue." in html
        return len(captured)

    assert fragment_queries(queued[-1]) == fragment_queries(queued[2])
