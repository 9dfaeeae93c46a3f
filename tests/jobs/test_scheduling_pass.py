"""A scheduling pass reads the queue only up to the first job that must wait, and writes each job's
holds in one insert: its queries do not grow with the queue behind its head."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import Job, State
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


def test_it_writes_a_jobs_holds_in_one_insert(organisation, online_slots):
    first, second = _queue(organisation, 2)
    started, queries = _one_pass()
    assert started == [first.pk, second.pk]
    inserts = [sql for sql in queries if sql.startswith('INSERT INTO "jobs_allocation"')]
    assert len(inserts) == 2, "one per job, for its two slots"


def test_it_reads_past_a_long_run_of_jobs_on_hold_in_few_queries(organisation, online_slots):
    on_hold = _queue(organisation, 200, gpus=1)
    Job.objects.filter(pk__in=[job.pk for job in on_hold]).update(on_hold_since=timezone.now())
    [waiting] = _queue(organisation, 1)
    started, queries = _one_pass()
    assert started == [waiting.pk], "the jobs on hold are passed by, in the query itself"
    assert len(queries) < 20
