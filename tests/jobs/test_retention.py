"""Retention of the staged copy and the output: each kept the days the partner chose when submitting,
then purged and the purge recorded; never purged while the job is active, nor (the staged copy) once a
pass has taken a sample's copy over."""

import re
from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.utils import timezone

from jobs import retention
from jobs.models import Job, State
from jobs.staging import stage
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db


def new_job(organisation, ended_days_ago: float | None = None, **fields) -> Job:
    ended_at = timezone.now() - timedelta(days=ended_days_ago) if ended_days_ago is not None else None
    return make_job(organisation, ended_at=ended_at, **fields)


def staged_job(organisation, state=State.SUCCEEDED, ended_days_ago=None, keep_days=3, **fields) -> Job:
    job = new_job(organisation, ended_days_ago, state=state, retention_days=keep_days, **fields)
    path = default_storage.save(f"{job.storage_prefix}/input/data.csv", ContentFile(b"id,text\n1,a\n"))
    Job.objects.filter(pk=job.pk).update(staged_path=path)
    job.refresh_from_db()
    return job


def test_a_staged_copy_is_kept_the_days_chosen_then_purged_and_the_purge_recorded(organisation, partner):
    due = staged_job(organisation, ended_days_ago=3.01)
    kept = staged_job(organisation, ended_days_ago=2.99)
    failed_due = staged_job(organisation, state=State.FAILED, ended_days_ago=4)
    running = staged_job(organisation, state=State.RUNNING, keep_days=0)

    assert sorted(retention.purge_expired()) == sorted([due.pk, failed_due.pk])
    for job in (due, failed_due):
        job.refresh_from_db()
        assert job.staged_purged_at is not None and not default_storage.exists(job.staged_path)
    page = client_for(partner).get(f"/jobs/{due.pk}/").content.decode()
    assert re.search(r"the staged copy kept 3 days after the job: deleted <span class=\"when\">\d{4}-", page)
    for job in (kept, running):
        job.refresh_from_db()
        assert job.staged_purged_at is None and default_storage.exists(job.staged_path)
    assert retention.purge_expired() == [], "a purge happens once"


def test_a_job_whose_staging_failed_says_no_copy_was_kept(organisation, partner):
    job = new_job(organisation, 0, state=State.FAILED, error="Staging failed: line 3 has an unmatched quote.")
    page = client_for(partner).get(f"/jobs/{job.pk}/").content.decode()
    assert "the staged copy deleted when the job ends: none was kept" in page and "(due" not in page


def test_a_sample_copy_taken_over_by_its_pass_while_the_purge_looked_is_not_purged(organisation, monkeypatch):
    sample = staged_job(organisation, kind=Job.Kind.SAMPLE, ended_days_ago=8, keep_days=7)
    passed = new_job(organisation, sample=sample, state=State.STAGING)
    due_at = retention.purge_due_at

    def pass_takes_the_copy_meanwhile(job):
        stage.take_sample_copy(passed)
        return due_at(job)

    monkeypatch.setattr(retention, "purge_due_at", pass_takes_the_copy_meanwhile)
    assert not retention.purge_staged_copy_if_due(sample.pk)
    passed.refresh_from_db()
    assert passed.staged_path == sample.staged_path and default_storage.exists(passed.staged_path)
    sample.refresh_from_db()
    assert sample.staged_path == "" and sample.staged_purged_at is None


def finished_job(organisation, ended_days_ago: float, keep_days: int = 30) -> Job:
    job = new_job(
        organisation,
        ended_days_ago,
        state=State.SUCCEEDED,
        output_keep_days=keep_days,
        output_path=f"jobs/{organisation.slug}/output-{ended_days_ago}",
        output_files=["output.parquet", "manifest.json"],
        records_out=10,
        records_rejected=0,
    )
    for name in job.output_files:
        default_storage.save(f"{job.output_path}/{name}", ContentFile(b"PAR1"))
    return job


def test_an_output_is_kept_the_days_chosen_then_purged_and_its_downloads_say_so(organisation, partner):
    client = client_for(partner)
    due, kept = finished_job(organisation, ended_days_ago=30.01), finished_job(organisation, ended_days_ago=29.99)
    assert "Kept until" in client.get(f"/jobs/{due.pk}/").content.decode()
    assert client.get(f"/jobs/{due.pk}/output/output.parquet").status_code == 200

    assert retention.purge_expired() == [due.pk]
    due.refresh_from_db()
    assert due.output_purged_at is not None and due.output_names == []
    assert not any(default_storage.exists(f"{due.output_path}/{name}") for name in due.output_files)
    assert due.events.last().message == "output deleted: kept 30 days after the job ended, as chosen"
    for url in (f"/jobs/{due.pk}/output/", f"/jobs/{due.pk}/output/output.parquet"):
        response = client.get(url)
        assert response.status_code == 410
        assert "It was kept 30 days after the job ended, as chosen" in response.content.decode()
    page = client.get(f"/jobs/{due.pk}/").content.decode()
    assert "Deleted on" in page and "Download all" not in page

    assert all(default_storage.exists(f"{kept.output_path}/{name}") for name in kept.output_files)
    assert retention.purge_expired() == [], "a purge happens once, and not before the day"
