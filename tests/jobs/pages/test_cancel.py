"""Cancelling: before staging ends nothing is ever held; while running, the GPUs are released at
once, the meter stops, and the finished shards are kept as a partial output."""

import json

import pytest
from django.core.files.storage import default_storage

from billing.models import LedgerEntry
from jobs import lifecycle
from jobs.models import Gpu, Job, Shard, State
from tests.factories import make_job
from tests.support import client_for, job_form, slow_job_form, wait_for, wait_for_end

HOLD = LedgerEntry.Kind.HOLD

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_releases_the_gpus_within_seconds_and_keeps_finished_shards(fleet, partner_client):
    partner_client.post("/jobs/new/", slow_job_form("1"))  # 20 s on 2 slots: the cancel lands before its end
    job = Job.objects.get()
    wait_for(lambda: Shard.objects.filter(job=job, status=Shard.Status.DONE).count() >= 2, timeout=60)

    response = partner_client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert f"Job #{job.pk} is cancelled; its CPU slots are released." in response.content.decode()
    job.refresh_from_db()
    assert job.state == State.CANCELLED
    assert not job.allocations.filter(held_to__isnull=True).exists(), "released at once"
    assert Gpu.objects.free().filter(node__name=fleet.name).count() == 2
    entry = LedgerEntry.objects.get(job=job, kind=HOLD)
    assert entry.held_to == max(job.allocations.values_list("held_to", flat=True))

    wait_for(lambda: Job.objects.get(pk=job.pk).output_path, timeout=30, what="the partial output")
    job.refresh_from_db()
    with default_storage.open(f"{job.output_path}/manifest.json") as handle:
        manifest = json.load(handle)
    assert manifest["complete"] is False
    assert manifest["records"]["out"] == job.records_out > 0
    assert manifest["records"]["not_processed"] == 2000 - job.records_out
    assert [event.state for event in job.events.all()][-1] == State.CANCELLED


def test_it_cancels_a_queued_job_without_ever_holding(fleet, partner_client):
    partner_client.post("/jobs/new/", slow_job_form("0.5"))
    first = Job.objects.get()
    wait_for(lambda: Job.objects.get(pk=first.pk).state == State.RUNNING, timeout=60)
    partner_client.post("/jobs/new/", slow_job_form())
    second = Job.objects.exclude(pk=first.pk).get()
    wait_for(lambda: Job.objects.get(pk=second.pk).state == State.QUEUED, timeout=60)

    response = partner_client.post(f"/jobs/{second.pk}/cancel/", follow=True)
    assert f"Job #{second.pk} is cancelled; it held no CPU slots." in response.content.decode()
    second.refresh_from_db()
    assert second.state == State.CANCELLED
    assert not second.allocations.exists()
    assert not LedgerEntry.objects.filter(job=second, kind=HOLD).exists()
    partner_client.post(f"/jobs/{first.pk}/cancel/")
    wait_for_end(first)


def test_it_refuses_to_cancel_an_ended_job(fleet, partner_client):
    partner_client.post("/jobs/new/", job_form())
    job = wait_for_end(Job.objects.get())
    response = partner_client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert "can no longer be cancelled" in response.content.decode()
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED


def test_it_says_one_slot_released_in_the_singular(organisation, partner, online_slots):
    job = make_job(organisation, State.QUEUED)
    assert lifecycle.start_hold(job, online_slots[:1])
    response = client_for(partner).post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert f"Job #{job.pk} is cancelled; its CPU slot is released." in response.content.decode()
