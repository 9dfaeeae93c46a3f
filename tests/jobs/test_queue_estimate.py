"""A queued job's latest start: the jobs running now release their slots at their time limits at the
latest, and each job ahead of it in the queue starts as soon as enough are free, holding them for all
its hours."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import lifecycle
from jobs.models import Job, State
from jobs.scheduling import latest_start
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def test_a_queued_job_starts_at_the_latest_when_the_jobs_before_it_reach_their_limits(
    organisation, online_slots, partner_client
):
    now = timezone.now()

    def job(gpus, hours, state=State.QUEUED, queued_minutes_ago=0) -> Job:
        queued_at = now - timedelta(minutes=queued_minutes_ago)
        return make_job(organisation, state, gpus=gpus, hours=hours, queued_at=queued_at)

    running = job(3, 2, queued_minutes_ago=90)
    assert lifecycle.start_hold(running, online_slots[:3])
    hour_ago = now - timedelta(hours=1)
    Job.objects.filter(pk=running.pk).update(started_at=hour_ago)
    running.allocations.update(held_from=hour_ago)  # releases by now + 1 h at the latest
    ahead, second = job(2, 1, queued_minutes_ago=4), job(2, 1, queued_minutes_ago=3)
    wide, too_wide = job(4, 0.5, queued_minutes_ago=2), job(5, 1, queued_minutes_ago=1)

    at = {queued.pk: latest_start(queued, now=now) for queued in (ahead, second, wide, too_wide)}
    assert at[ahead.pk] == now + timedelta(hours=1), "1 slot free: it waits for the running job's 3"
    assert at[second.pk] == now + timedelta(hours=1), "2 of the 4 left once the first of the queue starts"
    assert at[wide.pk] == now + timedelta(hours=2), "all 4: once both before it have run their hours"
    assert at[too_wide.pk] is None, "more slots than are online"
    assert latest_start(Job.objects.get(pk=running.pk)) is None, "running already"

    Job.objects.filter(pk__in=[ahead.pk, second.pk]).update(held_before=timedelta(minutes=30))
    assert latest_start(wide, now=now) == now + timedelta(hours=1.5), "the two before it had held half their hour"

    page = partner_client.get(f"/jobs/{wide.pk}/").content.decode()
    assert "Number 3 in the queue." in page and "this one needs 4 and waits for the 2 before it" in page
    shown = re.search(r'It starts by <span class="when">([\d-]+ [\d:]+)</span> UTC at the latest', page)[1]
    expected = latest_start(wide)
    assert shown in {f"{expected:%Y-%m-%d %H:%M}", f"{expected - timedelta(minutes=1):%Y-%m-%d %H:%M}"}
