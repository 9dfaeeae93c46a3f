"""An operator hold: the operators keep a job that holds no GPU yet from starting. It stages as before,
keeps its place in the queue and is passed by, unmetered, until the hold is lifted."""

import re
import time
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import transaction
from django.utils import timezone

from billing.models import LedgerEntry
from jobs import lifecycle
from jobs.management.commands.submit import progress_line
from jobs.models import Job, State
from jobs.outputs.assemble import _staging
from jobs.scheduling import latest_start, queue_position, schedule
from tests.factories import make_job
from tests.support import admin_action, client_for, submit_example, wait_for, wait_for_end


def _queued(organisation, gpus: int) -> Job:
    return make_job(organisation, State.QUEUED, gpus=gpus)


@pytest.mark.django_db
def test_it_passes_a_job_on_hold_by_and_starts_it_in_its_place_once_lifted(organisation, online_slots, operator):
    wide, narrow = _queued(organisation, 3), _queued(organisation, 2)
    assert lifecycle.put_on_hold(wide, reason="fleet maintenance")

    assert schedule() == [narrow.pk], "the job behind it starts: the one on hold holds nothing up"
    wide.refresh_from_db()
    assert wide.state == State.QUEUED and not wide.allocations.exists()
    assert latest_start(wide) is None, "no start to promise while on hold"
    assert wide.events.last().message == "put on hold by the operators: fleet maintenance"

    assert lifecycle.lift_hold(wide)
    assert not lifecycle.lift_hold(wide), "lifted once"
    after = make_job(organisation, State.QUEUED, gpus=2, hours=5)  # more work than the wide job's: after it
    assert queue_position(after) == 2, "the lifted job kept its place before a job queued since"
    assert schedule() == [], "2 of 4 slots are held: it waits for its 3"
    lifecycle.release(Job.objects.get(pk=narrow.pk))
    assert schedule() == [wide.pk]
    assert wide.events.filter(message="hold lifted by the operators").exists()


@pytest.mark.django_db
def test_it_puts_on_hold_only_a_job_that_holds_no_gpu_yet(organisation, online_slots, operator):
    running, ended, queued = _queued(organisation, 1), _queued(organisation, 1), _queued(organisation, 1)
    assert lifecycle.start_hold(running, online_slots[:1])
    assert lifecycle.cancel(ended)
    assert lifecycle.put_on_hold(queued)

    assert not lifecycle.put_on_hold(Job.objects.get(pk=running.pk)), "running: cancel it instead"
    assert not lifecycle.put_on_hold(ended), "ended"
    assert not lifecycle.put_on_hold(queued), "on hold already"
    assert Job.objects.filter(on_hold_since__isnull=False).get() == queued
    lifecycle.cancel(queued)
    assert not lifecycle.lift_hold(queued), "an ended job has no hold to lift"
    assert queued.events.filter(message__startswith="hold lifted").count() == 0


@pytest.mark.django_db
def test_a_hold_wins_over_a_scheduler_that_read_the_queue_before_it(organisation, online_slots, operator):
    job = _queued(organisation, 1)
    read_before = Job.objects.get(pk=job.pk)  # as schedule() had it, before the operator acted
    lifecycle.put_on_hold(job)

    assert lifecycle.start_hold(read_before, online_slots[:1]) == []
    assert Job.objects.get(pk=job.pk).state == State.QUEUED and not job.allocations.exists()


@pytest.mark.django_db
def test_the_partner_reads_why_and_the_jobs_behind_do_not_wait_for_it(
    organisation, online_slots, operator, partner_client
):
    on_hold, behind = _queued(organisation, 4), _queued(organisation, 4)
    busy = _queued(organisation, 4)
    assert lifecycle.start_hold(busy, online_slots)  # the fleet is busy: both wait
    lifecycle.put_on_hold(on_hold, reason="checking the GPUs of node b7")

    page = partner_client.get(f"/jobs/{on_hold.pk}/").content.decode()
    assert '<span class="state big on_hold">On hold</span>' in page, "its badge"
    assert "On hold: the operators are keeping this job from starting (checking the GPUs of node b7)." in page
    assert "the 4 CPU slots it asks for are free." in page
    assert "keeps its place in the queue, number 1," in page and "at the latest" not in page
    assert "put on hold by the operators: checking the GPUs of node b7" in page, "on the timeline"
    timeline = page.split('<ol class="timeline">')[1].split("</ol>")[0]
    assert re.findall(r'<span class="state (\w+)">([^<]+)</span>', timeline) == [("on_hold", "On hold")], "not Queued"
    behind_page = partner_client.get(f"/jobs/{behind.pk}/").content.decode()
    assert "Number 2 in the queue." in behind_page
    assert "waits for the 1 before it; 1 of those is on hold, passed by while the hold lasts." in behind_page
    released = Job.objects.get(pk=busy.pk).time_limit_at()
    assert latest_start(behind) == released + timedelta(hours=1), "as if the hold were lifted in time"
    listing = partner_client.get("/jobs/").content.decode()
    assert listing.count('<span class="state on_hold">On hold</span>') == 1 and "on hold</small>" not in listing
    assert "· queued (on hold by the operators)" in progress_line(Job.objects.get(pk=on_hold.pk)), "the CLI's --wait"
    lifecycle.lift_hold(on_hold)
    timeline = partner_client.get(f"/jobs/{on_hold.pk}/").content.decode().split('<ol class="timeline">')[1]
    assert '<span class="state queued">Hold lifted</span>' in timeline.split("</ol>")[0]


@pytest.mark.django_db
def test_one_slot_on_hold_reads_in_the_singular(organisation, online_slots, operator, partner_client):
    job = _queued(organisation, 1)
    lifecycle.put_on_hold(job)
    assert "the 1 CPU slot it asks for is free." in partner_client.get(f"/jobs/{job.pk}/").content.decode()


@pytest.mark.django_db
def test_a_job_put_on_hold_while_it_stages_says_so(organisation, operator, partner_client):
    job = _queued(organisation, 1)
    Job.objects.filter(pk=job.pk).update(state=State.STAGING)
    lifecycle.put_on_hold(job)

    page = partner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "The operators have put it on hold: once staged it waits in the queue until they lift the hold." in page


@pytest.mark.django_db
def test_the_operator_gives_a_reason_and_lifts_the_hold_in_the_console(organisation, online_slots, operator):
    queued, running = _queued(organisation, 1), _queued(organisation, 1)
    lifecycle.start_hold(running, online_slots[:1])
    client = client_for(operator)

    asked = admin_action(client, "put_on_hold", [queued, running]).content.decode()
    assert "Put jobs on hold" in asked and f"Job #{queued.pk}: clean-table over a.csv" in asked
    assert not Job.objects.filter(on_hold_since__isnull=False).exists(), "nothing until the operator confirms"

    too_long = admin_action(client, "put_on_hold", [queued], apply="Put on hold", reason="x" * 301).content.decode()
    assert "Ensure this value has at most 300 characters" in too_long
    assert not Job.objects.filter(on_hold_since__isnull=False).exists()

    done = admin_action(
        client, "put_on_hold", [queued, running], apply="Put on hold", reason="quota review"
    ).content.decode()
    assert f"Job #{queued.pk} is on hold: it will not start until the hold is lifted." in done
    assert f"Job #{running.pk} is running: only a job that holds no slot yet can be put on hold" in done
    queued.refresh_from_db()
    assert queued.on_hold and queued.on_hold_reason == "quota review"
    assert not Job.objects.get(pk=running.pk).on_hold_since

    again = admin_action(client, "put_on_hold", [queued], apply="Put on hold", reason="").content.decode()
    assert f"Job #{queued.pk} was on hold already." in again
    assert Job.objects.get(pk=queued.pk).on_hold_reason == "quota review", "the first reason stands"

    listed = client.get("/admin/jobs/job/", {"on_hold": "yes"}).content.decode()
    assert f"/admin/jobs/job/{queued.pk}/change/" in listed and f"/admin/jobs/job/{running.pk}/change/" not in listed

    lifted = admin_action(client, "lift_hold", [queued]).content.decode()
    assert "Lifted the hold of 1 job." in lifted
    history = LogEntry.objects.filter(object_id=str(queued.pk), user=operator).order_by("pk")
    assert [entry.change_message for entry in history] == ["Put on hold: quota review.", "Lifted its hold."]
    assert not Job.objects.get(pk=queued.pk).on_hold


@pytest.mark.django_db
def test_staff_who_may_only_view_jobs_cannot_put_them_on_hold(organisation, django_user_model):
    job = _queued(organisation, 1)
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_job"))

    admin_action(client_for(viewer), "put_on_hold", [job], apply="Put on hold", reason="no")
    assert not Job.objects.get(pk=job.pk).on_hold


@pytest.mark.django_db(transaction=True)
def test_a_job_on_hold_waits_unmetered_beside_free_slots_and_runs_once_lifted(fleet, organisation, partner):
    with transaction.atomic():  # put on hold before its staging is sent, which is on commit
        job = submit_example(organisation, partner)
        assert lifecycle.put_on_hold(job, reason="maintenance")
    wait_for(lambda: Job.objects.get(pk=job.pk).state == State.QUEUED, timeout=60, what="staging to end")

    deadline = time.monotonic() + 6  # free slots, heartbeats and schedules: it stays queued all the while
    while time.monotonic() < deadline:
        assert not job.allocations.exists(), "a job on hold was held"
        time.sleep(0.2)
    assert not LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD).exists()

    assert lifecycle.lift_hold(job)
    wait_for_end(job)
    assert job.state == State.SUCCEEDED
    hold = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.HOLD)
    assert hold.held_from >= job.events.get(message="hold lifted by the operators").at, "metered from the lift on"


@pytest.mark.django_db
def test_notes_of_a_hold_leave_the_manifests_staging_times_alone(organisation):
    job = _queued(organisation, 1)
    staged = timezone.now() - timedelta(minutes=10)
    job.events.create(state=State.STAGING, at=staged, message="staging a.csv")
    job.events.create(state=State.QUEUED, at=staged + timedelta(seconds=30), message="staged")
    lifecycle.put_on_hold(job)
    lifecycle.lift_hold(job)

    times = _staging(job)
    assert (times["started"], times["finished"]) == (staged.isoformat(), (staged + timedelta(seconds=30)).isoformat())
