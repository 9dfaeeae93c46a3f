"""A sample sizes the request: it stages the data, runs the work on one slot for a few seconds, and
its speed becomes an estimate for each shape; the full pass then takes the sample's staged copy over
and is cut into shards of about E31_SHARD_SECONDS of work."""

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command
from django.utils import timezone
from django.utils.html import escape

from billing.models import LedgerEntry, RateCard
from jobs import services
from jobs.models import Job, Shard, State
from jobs.scheduling import sizing
from jobs.spec import Request, Retention
from jobs.workers.runner import skip_past_budget
from portal import units
from tests.factories import finished_sample
from tests.support import OutputZip, job_form, wait_for_end

SECONDS_PER_BATCH = "0.2"  # test-slow-echo: 50 records a batch, so at most 250 records a second


@pytest.fixture(scope="module")
def gpuworker(sampling_gpuworker):
    """This module's slots: samples stop after 3 s, passes are cut into shards of 1 s of work."""
    return sampling_gpuworker


def dataset(rows: int = 4000) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id", "text"])
    writer.writerows((i, f"record number {i}") for i in range(1, rows + 1))
    return out.getvalue().encode()


def sample_form(**fields) -> dict:
    return job_form(
        dataset(),
        name="records.csv",
        work="test-slow-echo",
        **{"param-test-slow-echo-seconds_per_batch": SECONDS_PER_BATCH},
        sample="on",
        **fields,
    )


def read_output(client, job: Job) -> tuple[list[dict], dict]:
    archive = OutputZip(client, job)
    return pq.read_table(io.BytesIO(archive.read("output.parquet"))).to_pylist(), json.loads(
        archive.read("manifest.json")
    )


@pytest.mark.django_db(transaction=True)
def test_a_sample_measures_the_work_and_its_pass_reuses_the_staged_copy(fleet, partner_client, rate_card):
    response = partner_client.post("/jobs/new/", sample_form(gpus="2", hours="3", retention="keep", keep_days="3"))
    assert response.status_code == 302
    sample = wait_for_end(Job.objects.get())
    assert sample.state == State.SUCCEEDED, sample.error
    assert (sample.kind, sample.gpus) == (Job.Kind.SAMPLE, 1)
    assert sample.retention_days == 7, "a sample keeps its staged copy for the pass that follows"

    done = list(sample.shards.filter(status=Shard.Status.DONE))
    skipped = sample.shards.filter(status=Shard.Status.SKIPPED)
    assert len(done) >= 2 and skipped.exists(), "it stopped taking shards once its 3 s were up"
    assert {shard.record_count for shard in done} == {250}, "a sample's shards are small"
    result = sample.sample_result
    asked = {
        "gpus": 2,
        "hours": "3",
        "shape": "short-wide",
        "retention_days": 3,
        "output_keep_days": 30,
        "deadline": None,
        "request": "flexible",
        "max_gpus": None,
    }
    assert result["request"] == asked
    assert result["records"] == sum(shard.record_count for shard in done)
    assert result["records_total"] == 4000
    assert 0 < result["records_per_second"] <= 250, "no faster than its sleeps allow; slower on a loaded machine"
    assert result["peak_memory_mb"] > 20
    assert "CPU slot" in result["slot"]

    rows, manifest = read_output(partner_client, sample)
    assert [row["_record"] for row in rows] == list(range(1, result["records"] + 1)), "the first records, once"
    assert manifest["kind"] == "sample"
    assert manifest["records"]["in"] == manifest["records"]["out"] == result["records"]
    assert manifest["sample"]["records_per_second"] == result["records_per_second"]
    hold = LedgerEntry.objects.get(job=sample, kind=LedgerEntry.Kind.HOLD)
    assert hold.gpus == 1 and hold.amount > 0, "a sample is held and billed like any job"

    page = partner_client.get(f"/jobs/{sample.pk}/").content.decode()
    two = sizing.estimate(result, 2)
    assert "Sample: sizing the full pass" in page
    assert f'value="{two.hours}"' in page, "the pass form is pre-filled from the estimate for the GPUs asked"
    assert escape(units.hundredths(two.gpu_hours)) in page and escape(units.money(two.cost, "USD")) in page

    one = sizing.estimate(result, 1)
    response = partner_client.get(f"/jobs/{sample.pk}/estimate/", {"gpus": "1"}, headers={"HX-Request": "true"})
    assert f'value="{one.hours}"' in response.content.decode(), "the hours follow the GPUs"
    assert one.seconds == pytest.approx(2 * two.seconds - result["startup_seconds"])
    assert "Give a whole number" in partner_client.get(f"/jobs/{sample.pk}/estimate/", {"gpus": "two"}).content.decode()

    staged = sample.staged_path
    response = partner_client.post(
        f"/jobs/{sample.pk}/pass/", {"gpus": "2", "hours": str(two.hours), "retention": "delete", "keep_days": "7"}
    )
    assert response.status_code == 302
    full = wait_for_end(Job.objects.get(sample=sample))
    assert full.state == State.SUCCEEDED, full.error
    sample.refresh_from_db()
    assert (full.kind, full.staged_path, sample.staged_path) == (Job.Kind.PASS, staged, ""), "taken over, not copied"
    assert full.input_sha256 == sample.input_sha256
    assert not LedgerEntry.objects.filter(job=full, kind=LedgerEntry.Kind.STAGING).exists(), "staged once, billed once"
    sizes = [shard.record_count for shard in full.shards.all()]
    assert sizes == [250] * 16, "cut to about 1 s of work each (4 per slot would be 500 records)"
    rows, manifest = read_output(partner_client, full)
    assert [row["_record"] for row in rows] == list(range(1, 4001))
    assert manifest["sized_by_sample"] == sample.pk
    assert not default_storage.exists(staged), "the pass's retention (delete when done) now governs the copy"
    page = partner_client.get(f"/jobs/{sample.pk}/").content.decode()
    assert f'the staged copy is now the data of the full pass, <a href="/jobs/{full.pk}/">job {full.pk}</a>' in page
    assert "(due " not in page, "the sample's own retention no longer applies"

    response = partner_client.post(f"/jobs/{sample.pk}/pass/", {"gpus": "1", "hours": "1", "retention": "delete"})
    assert response.status_code == 400
    assert "staged copy of sample" in response.content.decode(), "a second pass has no staged copy to take"


@pytest.mark.django_db(transaction=True)
def test_the_cli_runs_a_sample_then_the_pass_it_sized(fleet, organisation, partner, rate_card, tmp_path):
    data = tmp_path / "records.csv"
    data.write_bytes(dataset(2000))
    common = ["--org", organisation.slug, "--as", "partner", "--gpus", "2"]
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "submit", *common, "--data", str(data), "--work", "test-slow-echo", "--hours", "1", "--sample",
        "--param", f"seconds_per_batch={SECONDS_PER_BATCH}", stdout=out, stderr=err,
    )  # fmt: skip
    line = json.loads(out.getvalue())
    sample = Job.objects.get(pk=line["job"])
    assert sample.kind == Job.Kind.SAMPLE and sample.state == State.SUCCEEDED
    assert line["gpus"] == 1 and line["sample"]["records_total"] == 2000
    assert [estimate["gpus"] for estimate in line["sample"]["estimates"]] == [2, 1], "wide, then narrow"
    assert f"--from-sample {sample.pk}" in err.getvalue()

    out = io.StringIO()
    call_command("submit", *common, "--from-sample", str(sample.pk), "--wait", stdout=out, stderr=io.StringIO())
    full = Job.objects.get(pk=json.loads(out.getvalue())["job"])
    assert full.state == State.SUCCEEDED and full.sample_id == sample.pk
    assert full.hours == Decimal(line["sample"]["estimates"][0]["hours"]), "hours from the sample's estimate"
    assert full.records_out == 2000

    with pytest.raises(CommandError, match=r"staged copy of sample \d+ is gone"):
        call_command("submit", *common, "--from-sample", str(sample.pk), stdout=io.StringIO(), stderr=io.StringIO())


def test_the_cli_says_a_sample_that_ran_over_every_record_needs_no_pass(fleet, organisation, partner, tmp_path):
    data = tmp_path / "records.csv"
    data.write_bytes(dataset(200))
    err = io.StringIO()
    call_command(
        "submit", "--org", organisation.slug, "--as", "partner", "--gpus", "1", "--data", str(data),
        "--work", "test-slow-echo", "--hours", "1", "--sample", "--param", "seconds_per_batch=0",
        stdout=io.StringIO(), stderr=err,
    )  # fmt: skip
    sample = Job.objects.get()
    assert sample.sample_was_whole
    whole = f"Sample {sample.pk} ran over every record: its output is the whole result; no pass is needed."
    assert whole in err.getvalue()
    assert "--from-sample" not in err.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from-sample", "1", "--data", "x.csv"], "drop --data"),
        (["--from-sample", "1", "--sample"], "drop --sample"),
        (["--from-sample", "99999"], "has no job 99999"),
        (["--data", "x.csv", "--hours", "1"], "Give --work"),
    ],
)
def test_the_cli_refuses_a_pass_it_cannot_run(db, organisation, partner, online_slots, args, message):
    with pytest.raises(CommandError, match=message):
        call_command(
            "submit", "--org", organisation.slug, "--as", "partner", "--gpus", "1", *args, stdout=io.StringIO()
        )


def test_a_pass_needs_a_finished_sample_with_its_staged_copy(organisation, online_slots):
    running = finished_sample(organisation, state=State.RUNNING)
    plain = finished_sample(organisation, kind=Job.Kind.PASS)
    purged = finished_sample(organisation, staged_purged_at=timezone.now())
    for job in (running, plain):
        with pytest.raises(services.SubmitError, match=f"Job {job.pk} is not a finished sample"):
            services.submit_pass(job, None, Request(1, 1), Retention())
    with pytest.raises(services.SubmitError, match="is gone"):
        services.submit_pass(purged, None, Request(1, 1), Retention())
    sample = finished_sample(organisation)
    for gpus, hours, message in [(0, 1, "at least one"), (9, 1, "ask for 4 or fewer"), (1, "soon", "not 'soon'")]:
        with pytest.raises(services.SubmitError, match=message):
            services.submit_pass(sample, None, Request(gpus, hours), Retention())
    with pytest.raises(services.SubmitError, match="0 to 90 days, not 91"):
        services.submit_pass(sample, None, Request(1, 1), Retention(91))


def test_outsiders_cannot_see_a_sample_or_start_its_pass(organisation, outsider_client, online_slots):
    sample = finished_sample(organisation)
    assert outsider_client.get(f"/jobs/{sample.pk}/estimate/", {"gpus": "1"}).status_code == 404
    assert outsider_client.post(f"/jobs/{sample.pk}/pass/", {"gpus": "1", "hours": "1"}).status_code == 404
    assert not Job.objects.filter(sample=sample).exists()


def test_the_pass_form_names_bad_values_and_keeps_the_sample(organisation, partner_client, online_slots):
    sample = finished_sample(organisation)
    for form, message in [
        ({"gpus": "0", "hours": "1", "retention": "delete"}, "Ask for at least one GPU, not 0."),
        ({"gpus": "1", "hours": "-2", "retention": "delete"}, "Hours must be more than zero, not -2."),
        ({"gpus": "1", "hours": "1", "retention": "keep", "keep_days": ""}, "Say how many days"),
    ]:
        response = partner_client.post(f"/jobs/{sample.pk}/pass/", form)
        assert response.status_code == 400 and message in response.content.decode(), form
    sample.refresh_from_db()
    assert sample.staged_path and not Job.objects.filter(sample=sample).exists()


def test_the_estimate_follows_the_measured_speed(organisation, rate_card):
    result = {"records_per_second": 10.0, "startup_seconds": 0.0, "records_total": 36_000}
    one, four = sizing.estimate(result, 1), sizing.estimate(result, 4)
    assert (one.seconds, one.hours, one.gpu_hours, one.cost) == (
        3600,
        Decimal("1.25"),
        Decimal("1.000"),
        Decimal("3.60"),
    )
    assert (four.seconds, four.hours, four.gpu_hours, four.cost) == (
        900,
        Decimal("0.50"),
        Decimal("1.000"),
        Decimal("3.60"),
    )
    assert (one.duration, four.duration) == ("1 h 00 min", "15 min")
    assert sizing.estimate({**result, "records_total": 36}, 1).duration == "4 s"
    assert sizing.estimate({**result, "startup_seconds": 60.0}, 4).gpu_hours == Decimal("1.067"), "start-up on each"
    assert sizing.estimate({**result, "records_per_second": None}, 1) is None
    assert [found.gpus for found in sizing.shapes(result, 8)] == [8, 2]
    assert [found.gpus for found in sizing.shapes(result, 2)] == [2, 1]
    assert [found.gpus for found in sizing.shapes(result, 1)] == [1]


def shard_part(table: pa.Table) -> str:
    """A shard's output part in storage, as a slot writes it."""
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return default_storage.save("jobs/test/shards/part.parquet", ContentFile(sink.getvalue()))


def done_shards(sample: Job, timings: list[tuple[int, float]], part) -> None:
    """Shards of the sample done in `timings` (records, seconds) one after the other, each with its part."""
    start = timezone.now()
    for index, (records, seconds) in enumerate(timings):
        Shard.objects.create(
            job=sample, index=index, first_record=1 + 100 * index, record_count=records, first_line=2 + 100 * index,
            start_byte=0, end_byte=0, status=Shard.Status.DONE, started_at=start + timedelta(seconds=20 * index),
            finished_at=start + timedelta(seconds=20 * index + seconds), peak_memory_mb=150 + index,
            output_path=shard_part(part(records)),
        )  # fmt: skip


def test_a_sample_measures_the_steady_speed_after_its_first_shard(organisation):
    sample = finished_sample(organisation, sample_result={})
    done_shards(sample, [(100, 12.0), (100, 2.0), (100, 2.0)], lambda records: pa.table({"id": range(records)}))
    Shard.objects.create(
        job=sample, index=3, first_record=301, record_count=100, first_line=302, start_byte=0, end_byte=0,
        status=Shard.Status.SKIPPED,
    )  # fmt: skip
    result = sizing.measure(sample)
    assert result["records"] == 300 and result["seconds"] == 16.0
    assert result["records_per_second"] == 50.0, "the first shard's start-up is left out of the speed"
    assert result["startup_seconds"] == 10.0
    assert result["peak_memory_mb"] == 152
    assert "tokens_per_second" not in result, "the work generates no tokens"


def test_a_sample_of_generate_measures_the_tokens_generated_per_second(organisation):
    sample = finished_sample(organisation, sample_result={})
    done_shards(
        sample, [(100, 12.0), (100, 2.0), (100, 2.0)], lambda records: pa.table({"output_tokens": [7] * records})
    )
    result = sizing.measure(sample)
    assert (result["records_per_second"], result["tokens_per_second"]) == (50.0, 350.0), "after the first shard"


def test_a_sample_past_its_time_runs_a_second_shard_before_it_stops(organisation, settings):
    settings.E31_SAMPLE_SECONDS = 5
    sample = finished_sample(organisation, state=State.RUNNING, started_at=timezone.now() - timedelta(seconds=6))
    for index in range(4):
        Shard.objects.create(
            job=sample, index=index, first_record=1 + 100 * index, record_count=100, first_line=2 + 100 * index,
            start_byte=0, end_byte=0, status=Shard.Status.DONE if index == 0 else Shard.Status.PENDING,
        )  # fmt: skip
    assert skip_past_budget(sample) == 0, "one shard shows no steady speed: its time includes the start-up"
    Shard.objects.filter(job=sample, index=1).update(status=Shard.Status.DONE)
    assert skip_past_budget(sample) == 2
    sample.started_at = timezone.now()
    Shard.objects.filter(job=sample, index=2).update(status=Shard.Status.PENDING)
    assert skip_past_budget(sample) == 0, "within its time it takes shards"


def test_the_estimate_warns_at_once_when_the_gpus_typed_exceed_the_fleet(
    organisation, partner_client, online_slots, rate_card
):  # fmt: skip
    sample = finished_sample(organisation)
    url = f"/jobs/{sample.pk}/estimate/"
    fits = partner_client.get(url, {"gpus": "4"}, headers={"HX-Request": "true"}).content.decode()
    assert "online: ask for" not in fits
    over = partner_client.get(url, {"gpus": "5"}, headers={"HX-Request": "true"}).content.decode()
    assert "The fleet has 4 CPU slots online: ask for 4 or fewer." in over


def test_an_estimate_of_a_small_pass_shows_its_cost_to_the_ledgers_precision(organisation):
    RateCard.objects.create(rate_per_gpu_hour=Decimal("2.10"), effective_from=timezone.now() - timedelta(days=1))
    result = {"records_per_second": 1000.0, "startup_seconds": 0.0, "records_total": 1_000}
    assert sizing.estimate(result, 1).cost == Decimal("0.0021"), "1 s on one GPU, not 0.00"
