"""A flexible job on real slots (issue 31): it runs on as many slots as are free, gives slots back at shard
boundaries to a job due sooner, and every record lands once, billed within its budget."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import LedgerEntry
from jobs.models import Job, State
from tests.support import slow_job_form, wait_for, wait_for_end


@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_a_flexible_job_gives_slots_back_to_a_job_due_sooner(fleet, partner_client, rate_card):
    flexible = slow_job_form(seconds_per_batch="2")  # eight shards of 250: five batches of 2 s each
    flexible.update(gpus="2", request_kind="flexible")
    assert partner_client.post("/jobs/new/", flexible).status_code == 302
    wide = Job.objects.get()
    wait_for(lambda: wide.allocations.filter(held_to=None).count() == 2, timeout=120, what="it to run on both slots")

    due = slow_job_form(seconds_per_batch="0.1")
    deadline = timezone.now() + timedelta(hours=2)
    due.update(gpus="1", request_kind="fixed", deadline=f"{deadline:%Y-%m-%dT%H:%M}")
    assert partner_client.post("/jobs/new/", due).status_code == 302
    urgent = Job.objects.exclude(pk=wide.pk).get()
    assert urgent.deadline_feasible is True, "the flexible job gives a slot back: it can start at once"
    wait_for_end(urgent, timeout=120)
    assert urgent.state == State.SUCCEEDED, urgent.error
    wide.refresh_from_db()
    assert wide.state == State.RUNNING or urgent.started_at < wide.ended_at, "it started while the wide job ran"
    gave = wide.events.filter(message__contains="given back at a shard boundary; it runs on 1")
    assert gave.exists(), "a slot given back at its shard boundary, the job running on on the other"

    wait_for_end(wide, timeout=180)
    assert wide.state == State.SUCCEEDED, wide.error
    assert wide.records_out == 2000, "every record once, however its width changed"
    [hold] = LedgerEntry.objects.filter(job=wide, kind=LedgerEntry.Kind.HOLD)
    assert hold.gpu_hours <= Decimal(2) * wide.hours, "never past its budget"
    assert wide.allocations.count() >= 3, "a hold a slot: the one given back, and one again once it was free"
