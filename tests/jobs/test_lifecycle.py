"""Transitions: each one wins once, illegal ones are refused, and holds are all-or-nothing."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs import lifecycle, tasks
from jobs.models import Allocation, Gpu, Job, Node, Shard, State
from jobs.scheduling import fleet, queue_position, schedule
from jobs.signals import state_changed
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(organisation):
    return make_job(organisation, gpus=2)


def test_it_moves_once_and_records_the_event(job):
    assert lifecycle.begin_staging(job, "claim-1", None)
    assert not lifecycle.begin_staging(job, "claim-2", None), "the second mover loses"
    assert list(job.events.values_list("state", "message")) == [("staging", "staging a.csv")]
    assert Job.objects.get(pk=job.pk).staging_claim == "claim-1"


@pytest.mark.parametrize(
    ("frm", "to"),
    [
        (State.SUBMITTED, State.RUNNING),
        (State.QUEUED, State.STAGING),
        (State.SUCCEEDED, State.RUNNING),
        (State.RUNNING, State.STAGING),
        (State.FINISHING, State.CANCELLED),
    ],
)
def test_it_refuses_to_skip_or_reverse_a_state(job, frm, to):
    # The table's own guard, under every named transition.
    with pytest.raises(ValueError, match=f"cannot go from {frm} to {to}"):
        lifecycle._move(job.pk, frm, to)


def test_it_holds_all_gpus_or_none(job, online_slots, organisation):
    other = make_job(organisation, State.QUEUED, source_name="b.csv")
    assert lifecycle.start_hold(other, [online_slots[1]])
    Job.objects.filter(pk=job.pk).update(state=State.QUEUED)
    assert lifecycle.start_hold(job, online_slots[:2]) == [], "one of its GPUs is taken"
    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert not Allocation.objects.filter(job=job).exists()
    assert job.started_at is None


def test_it_fails_a_job_with_the_reason_and_releases_it(job, online_slots):
    Job.objects.filter(pk=job.pk).update(state=State.QUEUED)
    lifecycle.start_hold(job, online_slots[:2])
    assert lifecycle.fail(job, "Shard 3 failed 3 times: boom")
    job.refresh_from_db()
    assert (job.state, job.error) == (State.FAILED, "Shard 3 failed 3 times: boom")
    assert not job.allocations.filter(held_to__isnull=True).exists()
    assert not lifecycle.fail(job, "again"), "an ended job stays as it ended"


def test_it_times_out_a_job_past_its_hours(job, online_slots):
    Job.objects.filter(pk=job.pk).update(state=State.QUEUED)
    lifecycle.start_hold(job, online_slots[:2])
    job.refresh_from_db()
    assert not job.time_limit_passed()
    assert job.time_limit_passed(now=timezone.now() + timedelta(hours=1, seconds=1))
    assert lifecycle.time_out(job)
    job.refresh_from_db()
    assert job.state == State.TIMED_OUT and "1.00 h limit" in job.error


def test_it_tells_a_queued_job_its_position(organisation):
    jobs = [make_job(organisation, State.QUEUED, source_name=f"{n}.csv") for n in range(3)]
    assert [queue_position(job) for job in jobs] == [1, 2, 3]


def test_it_lets_smaller_jobs_pass_a_head_job_bigger_than_the_online_fleet(organisation, online_slots):
    def queued(gpus, hours=1):
        return make_job(organisation, State.QUEUED, gpus=gpus, hours=hours)

    too_wide, fits, waits = queued(6), queued(3), queued(2, hours=3)
    assert schedule() == [fits.pk], "the 6-GPU job waits for its node; the 2-GPU job, more work, waits behind the 3"
    too_wide.refresh_from_db()
    waits.refresh_from_db()
    assert (too_wide.state, waits.state) == (State.QUEUED, State.QUEUED)


def test_it_fails_a_job_whose_output_cannot_be_assembled(job, online_slots):
    Job.objects.filter(pk=job.pk).update(state=State.QUEUED, records_total=10)
    lifecycle.start_hold(job, online_slots[:2])
    Shard.objects.create(
        job=job, index=0, first_record=1, record_count=10, first_line=2, start_byte=0, end_byte=10,
        status=Shard.Status.DONE, records_out=10, records_rejected=0, output_path="jobs/missing.parquet",
        rejects_path="jobs/missing.rejects.parquet",
    )  # fmt: skip
    assert lifecycle.finish_pass(job)
    assert tasks.assemble(job.pk) is False
    job.refresh_from_db()
    assert job.state == State.FAILED
    assert job.error.startswith("Assembling the output failed: ")


def test_it_does_not_let_operators_delete_a_job(job, operator):
    response = client_for(operator).get(f"/admin/jobs/job/{job.pk}/delete/")
    assert response.status_code == 403


def test_it_runs_jobs_on_gpus_only_once_any_gpu_is_online(organisation, online_slots):
    node = Node.objects.create(name="gpu-box", hostname="gpu-box", last_seen=timezone.now())
    gpu = Gpu.objects.create(
        node=node, index=0, kind=Gpu.Kind.GPU, name="NVIDIA H100", queue="slot.gpu-box.0", last_seen=timezone.now()
    )
    assert (fleet().online, fleet().noun) == (1, "GPU")
    job = make_job(organisation, State.QUEUED)
    assert schedule() == [job.pk]
    assert [a.gpu for a in job.allocations.all()] == [gpu]


def test_it_tells_listeners_of_each_move_once_it_is_committed(job, django_capture_on_commit_callbacks):
    heard = []

    def listener(sender, job_id, state, previous, at, **kwargs):
        heard.append((job_id, previous, state))

    def broken(sender, **kwargs):
        raise RuntimeError("a listener that fails")

    state_changed.connect(listener, weak=False)
    state_changed.connect(broken, weak=False)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert lifecycle.begin_staging(job, "claim-1", None)
            assert heard == [], "not before the move is committed"
        with django_capture_on_commit_callbacks(execute=True):
            assert lifecycle.cancel(job), "a listener that fails does not undo the move"
        with django_capture_on_commit_callbacks(execute=True) as moves:
            assert not lifecycle.cancel(job)
        assert moves == []
    finally:
        state_changed.disconnect(listener)
        state_changed.disconnect(broken)
    # cancel moves from one of four states: the one it left is the one it was in.
    assert heard == [(job.pk, State.SUBMITTED, State.STAGING), (job.pk, State.STAGING, State.CANCELLED)]
    assert Job.objects.get(pk=job.pk).state == State.CANCELLED


def test_behind_a_job_that_must_wait_only_jobs_that_cannot_delay_it_start(organisation, online_slots):
    """EASY backfill. 4 slots, 2 held by a job for an hour: the 4-slot job at the head is promised the slots
    in an hour; a job that ends before then starts now, one that would run past it and take its slots waits."""
    running = make_job(organisation, State.QUEUED, gpus=2, hours=Decimal("1"))
    lifecycle.start_hold(running, online_slots[:2])

    def queued(gpus, hours):
        return make_job(organisation, State.QUEUED, gpus=gpus, hours=Decimal(hours))

    head, short, long, also_short = queued(4, "1"), queued(1, "0.5"), queued(1, "2"), queued(1, "0.5")
    assert schedule() == [short.pk, also_short.pk], "the head's slots are free again before it could start"
    assert set(Job.objects.filter(state=State.QUEUED).values_list("pk", flat=True)) == {head.pk, long.pk}
