"""The queue: a fixed request waits until all its GPUs are free at once, unmetered, and starts in queue order."""

import pytest

from billing.models import LedgerEntry
from jobs.models import Job, State
from tests.support import slow_job_form, wait_for, wait_for_end

HOLD = LedgerEntry.Kind.HOLD

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_waits_for_all_its_gpus_and_meters_only_the_hold(fleet, partner_client):
    partner_client.post("/jobs/new/", {**slow_job_form("1"), "request_kind": "fixed"})  # 20 s: the second waits
    first = Job.objects.get()
    wait_for(lambda: Job.objects.get(pk=first.pk).state == State.RUNNING, timeout=60)
    partner_client.post("/jobs/new/", {**slow_job_form("0.05"), "request_kind": "fixed"})
    second = Job.objects.exclude(pk=first.pk).get()
    staged = Job.objects.filter(pk=second.pk, state=State.QUEUED, streaming=False)
    wait_for(staged.exists, timeout=60, what="the second job staged whole and queued")

    page = partner_client.get(f"/jobs/{second.pk}/").content.decode()
    assert "Number 1 in the queue" in page
    assert not second.allocations.exists()
    assert Job.objects.get(pk=first.pk).state == State.RUNNING

    wait_for_end(first)
    wait_for_end(second)
    assert first.state == second.state == State.SUCCEEDED
    first_entry, second_entry = (
        LedgerEntry.objects.get(job=first, kind=HOLD),
        LedgerEntry.objects.get(job=second, kind=HOLD),
    )
    assert second_entry.held_from >= first_entry.held_to, "the second hold starts when the first is released"
    queued_at = second.events.filter(state=State.QUEUED).earliest("at").at  # queued on its first shard staged
    assert second_entry.held_from > queued_at, "nothing metered while queued"
    assert second.events.get(state=State.RUNNING).at == second_entry.held_from
