"""A scheduling pass reads the queue only up to the first job that must wait, and starts the jobs it
found room for together: one UPDATE of the jobs, one insert of their holds. Its queries do not grow with
the queue behind its head, the fleet, or how many jobs it starts."""

import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import Allocation, Gpu, Job, JobEvent, Node, State
from jobs.scheduling import schedule
from tests.factories import make_job

pytestmark = pytest.mark.django_db


class RolledBack(Exception):
    pass


def _one_pass() -> tuple[list[int], list[str]]:
    """The jobs one pass starts and the SQL it sends, the pass then rolled back."""
    try:
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            started = schedule()
            raise RolledBack
    except RolledBack:
        return started, [query["sql"] for query in queries]


def _queue(organisation, count: int, gpus: int = 2) -> list[Job]:
    """`count` jobs at the tail of the queue."""
    tail = Job.objects.filter(state=State.QUEUED).order_by("queued_at").values_list("queued_at", flat=True).last()
    after = tail or timezone.now()
    return [
        make_job(organisation, State.QUEUED, gpus=gpus, queued_at=after + timedelta(seconds=n))
        for n in range(1, count + 1)
    ]


def test_its_queries_do_not_grow_with_the_queue_behind_the_head(organisation, online_slots):
    head = _queue(organisation, 3)
    short_started, short = _one_pass()
    _queue(organisation, 150)  # behind the third job, which waits: the pass never reads them
    long_started, long = _one_pass()
    assert short_started == long_started == [head[0].pk, head[1].pk]
    assert len(long) == len(short)


def _fleet(nodes: int) -> None:
    """`nodes` online nodes of eight free CPU slots each, and no other slot online."""
    Gpu.objects.update(last_seen=None)
    now = timezone.now()
    for n in range(nodes):
        node = Node.objects.create(name=f"node-{n:03d}", hostname=f"cpu{n:03d}", last_seen=now)
        Gpu.objects.bulk_create(
            Gpu(node=node, index=i, kind=Gpu.Kind.CPU, name="CPU slot", queue=f"slot.{node.name}.{i}", last_seen=now)
            for i in range(8)
        )


def _statements(queries: list[str]) -> list[str]:
    """The queries as their first words, the kind of statement and its table, savepoints and cursors (PostgreSQL's
    server-side ones, which a pass reads the queue through) unnamed."""
    unnamed = (re.sub(r'(SAVEPOINT|DECLARE) "\w+"', r"\1", sql) for sql in queries)
    return [" ".join(sql.split()[:3]) for sql in unnamed]


def test_it_starts_the_jobs_it_has_room_for_in_one_update_and_one_insert(organisation, online_slots):
    first, second = _queue(organisation, 2)
    started, queries = _one_pass()
    assert started == [first.pk, second.pk]
    statements = _statements(queries)
    assert statements.count('UPDATE "jobs_job" SET') == 1
    assert statements.count('INSERT INTO "jobs_allocation"') == 1, "every hold of both jobs"
    assert statements.count('INSERT INTO "jobs_jobevent"') == 1, "a line on each timeline"


def test_it_starts_each_job_on_its_own_slots_with_a_slot_task_each(organisation, online_slots):
    first, second = _queue(organisation, 2)
    assert schedule() == [first.pk, second.pk]
    for job in (first, second):
        job.refresh_from_db()
        assert job.state == State.RUNNING
        assert job.started_at is not None
        assert JobEvent.objects.filter(job=job, state=State.RUNNING).count() == 1
    holds = Allocation.objects.filter(held_to=None)
    assert sorted(holds.values_list("gpu_id", flat=True)) == sorted(slot.pk for slot in online_slots)
    assert {job: holds.filter(job=job).count() for job in (first.pk, second.pk)} == {first.pk: 2, second.pk: 2}
    runners = list(holds.values_list("runner", flat=True))
    assert all(runners) and len(set(runners)) == 4, "each hold is served by a task of its own"


def test_a_job_held_before_starts_with_that_much_less_of_its_hours_beside_a_fresh_one(organisation, online_slots):
    again, fresh = _queue(organisation, 2)
    lost = timezone.now() - timedelta(hours=2)
    Allocation.objects.bulk_create(
        [  # two GPUs held together for 30 minutes, then lost with their node; one held 10 minutes more
            Allocation(job=again, gpu=online_slots[0], held_from=lost, held_to=lost + timedelta(minutes=30)),
            Allocation(job=again, gpu=online_slots[1], held_from=lost, held_to=lost + timedelta(minutes=40)),
        ]
    )
    assert schedule() == [again.pk, fresh.pk]
    assert Job.objects.get(pk=again.pk).held_before == timedelta(minutes=40)
    assert Job.objects.get(pk=fresh.pk).held_before == timedelta()


def test_its_queries_do_not_grow_with_the_fleet_or_the_jobs_it_starts(organisation, db):
    """Two jobs started on a fleet of 8 free slots, then 16 on 256 slots of which 224 are held: the same
    queries, one job waiting behind each. (SQLite takes at most 999 values a statement, so there Django
    splits an insert of more than 124 holds in several.)"""
    _fleet(1)
    _queue(organisation, 3, gpus=4)
    few, small = _one_pass()
    Job.objects.all().delete()
    Node.objects.all().delete()
    _fleet(32)
    busy = make_job(organisation, State.RUNNING, gpus=224, started_at=timezone.now())
    held = Gpu.objects.order_by("pk")[:224]
    Allocation.objects.bulk_create(Allocation(job=busy, gpu=gpu, held_from=busy.started_at) for gpu in held)
    _queue(organisation, 16, gpus=2)
    _queue(organisation, 1, gpus=8)  # 32 free slots, all taken by the 16 before it: this one waits
    _queue(organisation, 100, gpus=1)  # least work first: 32 of these start, before the 16
    many, large = _one_pass()
    assert (len(few), len(many)) == (2, 32)
    assert _statements(large) == _statements(small)


def test_it_reads_past_a_long_run_of_jobs_on_hold_in_few_queries(organisation, online_slots):
    on_hold = _queue(organisation, 200, gpus=1)
    Job.objects.filter(pk__in=[job.pk for job in on_hold]).update(on_hold_since=timezone.now())
    [waiting] = _queue(organisation, 1)
    started, queries = _one_pass()
    assert started == [waiting.pk], "the jobs on hold are passed by, in the query itself"
    assert len(queries) <= 23, "the queue (its deadlines, then all), the fleet, the fair share, quotas: not one a job"
