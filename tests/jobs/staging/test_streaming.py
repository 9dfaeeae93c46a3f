"""Staging that streams into the pass: shards are claimed while the rest of the data is still arriving, a
slot that finds nothing staged gives its hold back, and an input that breaks once the pass has started
fails the job saying where, with what ran billed as served and kept as a partial output."""

import gzip
import hashlib
import http.server
import itertools
import json
import re
import shutil
import threading
from datetime import timedelta

import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.utils import timezone

from api.representation import job_json
from billing.models import LedgerEntry
from jobs import lifecycle, processors
from jobs.models import Job, Shard, State
from jobs.scheduling import pacing
from jobs.staging import stage, streaming
from jobs.staging.describe import describe_and_cut
from jobs.staging.progress import StagingProgress
from tests.factories import make_job
from tests.support import job_form, wait_for, wait_for_end

RECORDS = 10_000
CSV = b"n,text\n" + b"".join(b"%d,row %d\n" % (n, n) for n in range(1, RECORDS + 1))
JSONL = b"".join(b'{"n": "%d", "text": "row %d"}\n' % (n, n) for n in range(1, RECORDS + 1))
HELD_BACK_SHARE = 0.85  # of the data, served before the test lets the rest go


class _Paused(http.server.BaseHTTPRequestHandler):
    """Serves `data`: its first HELD_BACK_SHARE at once, then the rest once `release` is set, or, when `breaks`,
    hangs up then instead. It takes no ranges: a resume gets the whole file again, so it cannot be resumed."""

    release = threading.Event()
    breaks = False
    data = CSV

    def do_GET(self):
        held_back = int(len(self.data) * HELD_BACK_SHARE)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.data)))
        self.end_headers()
        self.wfile.write(self.data[:held_back])
        self.wfile.flush()
        self.release.wait(120)
        if self.breaks:
            self.close_connection = True
            return
        self.wfile.write(self.data[held_back:])

    def log_message(self, *args):
        return


@pytest.fixture
def paused_server():
    _Paused.release = threading.Event()
    _Paused.breaks = False
    _Paused.data = CSV
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Paused)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    _Paused.release.set()
    server.shutdown()


def submit(client, server, name="numbers.csv", **fields) -> Job:
    form = job_form(
        location=f"http://localhost:{server.server_address[1]}/{name}", work="test-slow-echo", gpus="1", **fields
    )
    form["param-test-slow-echo-seconds_per_batch"] = "0"
    del form["data"]
    assert client.post("/jobs/new/", form).status_code == 302
    return Job.objects.get()


def refreshed(job: Job) -> Job:
    job.refresh_from_db()
    return job


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("data, kind", [(CSV, "flexible"), (JSONL, "fixed")], ids=["csv-flexible", "jsonl-fixed"])
def test_it_runs_the_first_shards_while_the_rest_is_still_staging(fleet, partner_client, paused_server, data, kind):
    _Paused.data = data
    job = submit(
        partner_client,
        paused_server,
        name="numbers.jsonl" if data is JSONL else "numbers.csv",
        **{"request_kind": kind},
    )
    wait_for(
        lambda: job.shards.filter(status=Shard.Status.DONE).exists(),
        what="a shard done while the data is still arriving",
    )
    assert refreshed(job).streaming and job.input_sha256 == "" and job.records_total is None
    page = partner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "% of the data staged" in page and "so far, of a total known once the data is staged" in page, page[
        page.find("status-line") : page.find("status-line") + 1500
    ]
    wait_for(
        lambda: refreshed(job).state == State.QUEUED and not job.allocations.filter(held_to=None).exists(),
        what="the slot to give its hold back once no staged shard was left for it",
    )
    assert job.streaming, "still staging: the job waits for its bytes in the queue, holding nothing"
    # Queued, or running again on a shard staged as its slot gave its hold back: either way how far staging got.
    said = r"(?:Staging goes on: |Running — )(\d+) % of the data staged"
    staged = re.search(said, partner_client.get(f"/jobs/{job.pk}/").text)
    assert staged and 80 <= int(staged[1]) <= 85, "as far as the source has sent"
    assert job.events.filter(message__contains="no staged shard was left for it").exists()
    _Paused.release.set()
    job = wait_for_end(job)
    assert job.state == State.SUCCEEDED, job.error
    assert not job.streaming and job.records_total == RECORDS and job.input_bytes == len(data)
    assert job.input_sha256 == hashlib.sha256(data).hexdigest()
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        numbers = pq.read_table(output, columns=["n"]).column("n").to_pylist()
    assert sorted(int(n) for n in numbers) == list(range(1, RECORDS + 1)), "every record once"
    shards = list(job.shards.order_by("index").values_list("first_record", "record_count"))
    assert all(first == sum(count for _, count in shards[:i]) + 1 for i, (first, _) in enumerate(shards))
    assert LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.STAGING, bytes=len(data)).exists()
    assert LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD).count() == 1
    assert job.allocations.count() >= 2, "held, given back while bytes came, held again"


@pytest.mark.django_db(transaction=True)
def test_an_input_that_breaks_after_the_pass_started_fails_the_job_naming_the_byte(
    fleet, partner_client, paused_server
):
    _Paused.breaks = True
    job = submit(partner_client, paused_server)
    wait_for(lambda: job.shards.filter(status=Shard.Status.DONE).exists(), what="the pass to start")
    _Paused.release.set()
    job = wait_for_end(job)
    assert job.state == State.FAILED
    held_back = int(len(CSV) * HELD_BACK_SHARE)
    expected = f"Staging failed after {held_back:,} bytes of the data were staged, once the pass had started:"
    assert job.error.startswith(expected), job.error
    assert "cannot resume" in job.error and "partial" in job.error
    assert not job.streaming
    done = job.shards.filter(status=Shard.Status.DONE)
    assert done.exists(), "the shards staged before the break ran"
    wait_for(lambda: refreshed(job).output_path, what="the partial output to be assembled")
    with default_storage.open(f"{job.output_path}/manifest.json", "rb") as handle:
        manifest = json.load(handle)
    assert manifest["complete"] is False and manifest["state"] == State.FAILED
    assert manifest["records"]["out"] == sum(done.values_list("records_out", flat=True))
    held = LedgerEntry.objects.filter(job=job, kind=LedgerEntry.Kind.HOLD)
    assert held.count() == (1 if job.allocations.exists() else 0), "the hours served stay billed"


@pytest.mark.django_db(transaction=True)
def test_a_checksum_that_does_not_match_fails_a_streaming_job_when_staging_ends(fleet, partner_client, paused_server):
    job = submit(partner_client, paused_server, sha256="0" * 64)
    wait_for(lambda: refreshed(job).streaming, what="the job to queue on its first shards")
    _Paused.release.set()
    job = wait_for_end(job)
    assert job.state == State.FAILED
    assert "checksum mismatch" in job.error and hashlib.sha256(CSV).hexdigest() in job.error


@pytest.mark.parametrize(
    "backlog_shards, backlog_bytes, left_bytes, staging_rate, slot_rate, ready",
    [
        (0, 0, 1000, 10, 5, False),  # nothing staged: a slot would wait
        (1, 100, 1000, 10, None, True),  # no rate measured: a shard a slot, then its shards' rate paces it
        (4, 400, 1000, 100, 50, True),  # the pass no faster than staging never catches up
        (4, 400, 10_000, 10, 100, False),  # far faster: it would catch up long before the end
        (4, 9_000, 10_000, 10, 10.5, True),  # a little faster: the backlog lasts until the end
        (4, 400, 0, 10, 100, True),  # every byte staged
    ],
)
def test_a_streaming_job_starts_once_its_backlog_lasts_until_staging_ends(
    backlog_shards, backlog_bytes, left_bytes, staging_rate, slot_rate, ready
):
    assert (
        pacing.may_start(
            width=1,
            backlog_shards=backlog_shards,
            backlog_bytes=backlog_bytes,
            left_bytes=left_bytes,
            staging_rate=staging_rate,
            slot_rate=slot_rate,
        )
        is ready
    )


@pytest.fixture
def streamed_job(organisation):
    """A test-slow-echo job of CSV from the partner's staging folder, staged once, whole."""
    folder = settings.E31_STAGING_ROOTS[0] / organisation.slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "numbers.csv").write_bytes(CSV)
    params = processors.get("test-slow-echo").validate_params({"seconds_per_batch": "0"})
    job = make_job(
        organisation, work="test-slow-echo", params=params, source_kind=Job.Source.PATH,
        source_uri=str(folder / "numbers.csv"), source_name="numbers.csv",
    )  # fmt: skip
    stage.stage(job.pk)
    yield refreshed(job)
    shutil.rmtree(settings.E31_STAGING_ROOTS[0])


def died_while_streaming(job: Job, kept: int) -> str:
    """Make the job as an attempt that died while it streamed leaves it: its first `kept` shards recorded, its
    copy as far as their end, its lease run out. The copy's name."""
    shards = job.shards.order_by("index")
    end = shards[kept - 1].end_byte
    job.shards.filter(index__gte=kept).delete()
    earlier = default_storage.save(f"{job.storage_prefix}/input/data-old.csv", ContentFile(CSV[:end]))
    Job.objects.filter(pk=job.pk).update(
        streaming=True, staging_claim="old", staging_lease_until=timezone.now() - timedelta(seconds=1),
        staged_path=earlier, records_total=None, input_sha256="",
    )  # fmt: skip
    return earlier


@pytest.mark.django_db(transaction=True)
def test_a_staging_taken_over_while_it_streamed_cuts_the_same_shards_and_adds_the_rest(streamed_job):
    job = streamed_job
    whole = list(job.shards.order_by("index").values_list("first_record", "record_count", "start_byte", "end_byte"))
    assert len(whole) >= 3 and job.state == State.QUEUED and not job.streaming
    earlier = died_while_streaming(job, kept=2)
    stage.stage(job.pk)
    job = refreshed(job)
    assert (job.state, job.streaming, job.records_total) == (State.QUEUED, False, RECORDS)
    again = list(job.shards.order_by("index").values_list("first_record", "record_count", "start_byte", "end_byte"))
    assert again == whole, "the shards recorded before kept, the rest added after them"
    assert job.staged_path != earlier and not default_storage.exists(earlier), "the new copy is the job's"
    with default_storage.open(job.staged_path, "rb") as staged:
        assert staged.read() == CSV
    assert job.events.filter(message="staging again: the attempt before it stopped").exists()


@pytest.mark.django_db(transaction=True)
def test_a_staging_taken_over_fails_the_job_when_the_data_cuts_differently(streamed_job):
    job = streamed_job
    died_while_streaming(job, kept=2)
    first = job.shards.get(index=0)
    job.shards.filter(index=0).update(end_byte=first.end_byte - 1)  # the earlier attempt cut other data
    stage.stage(job.pk)
    job = refreshed(job)
    assert job.state == State.FAILED
    assert f"the data differs from what was staged before at byte {first.start_byte:,}" in job.error


def followed(job: Job, data: bytes, sizing: dict | None = None) -> tuple[streaming.Follower, list[dict]]:
    """The shards a follower cuts from `data`, a copy already complete (sized by `sizing`, an earlier attempt's,
    if given), and the follower."""
    path = default_storage.save(f"test-follow/{job.pk}/data", ContentFile(data))
    made: list[dict] = []
    source = (lambda: len(data), lambda: len(data))
    follower = streaming.Follower(job, path, source, lambda shards, layout: made.extend(shards), lambda: None, sizing)
    follower.complete.set()
    follower.run()
    default_storage.delete(path)
    assert follower.error is None, follower.error
    return follower, made + follower.rest()


QUOTED = b"n,text\n" + b"".join(b'%d,"line one\nline two of %d"\n' % (n, n) for n in range(1, 3001))
ONE_COLUMN = b"n\n" + b"".join(b"%d\n" % n for n in range(1, 3001))
OPEN_QUOTE = CSV + b'10001,"never closed\n10002,after it\n'
BLANK_LINES = JSONL.replace(b"\n", b"\n\n  \n", 50)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "data", [CSV, QUOTED, ONE_COLUMN, OPEN_QUOTE, BLANK_LINES],
    ids=["csv", "quoted-newlines", "one-column", "quote-left-open", "jsonl-blank-lines"],
)  # fmt: skip
def test_the_shards_cut_behind_the_copy_hold_every_record_once_as_staging_whole_counts_them(
    organisation, monkeypatch, data
):
    monkeypatch.setattr(settings, "E31_SHARD_RECORDS", 700)
    params = processors.get("test-slow-echo").validate_params({})
    name = "data.jsonl" if data is BLANK_LINES else "data.csv"  # a CSV of one column is known by its name
    job = make_job(organisation, State.STAGING, work="test-slow-echo", params=params, source_name=name, gpus=2)
    whole = default_storage.save(f"test-follow/{job.pk}/whole", ContentFile(data))
    try:
        _, _, records, _ = describe_and_cut(job, whole, StagingProgress(job.pk, job.staging_claim))
    finally:
        default_storage.delete(whole)
    follower, made = followed(job, data)
    assert follower.records == records
    assert sum(shard["record_count"] for shard in made) == records
    assert [shard["index"] for shard in made] == list(range(len(made)))
    assert all(a["end_byte"] == b["start_byte"] for a, b in itertools.pairwise(made)), "no byte left out"
    assert all(a["first_record"] + a["record_count"] == b["first_record"] for a, b in itertools.pairwise(made))
    assert made[0]["start_byte"] == follower.layout["data_offset"] and made[-1]["end_byte"] >= len(data.rstrip())
    assert len(made) > 4 and all(shard["record_count"] > 0 for shard in made)


@pytest.mark.django_db
def test_the_first_shards_ramp_up_and_the_last_taper_the_same_on_every_attempt(organisation):
    """The pass starts on the first bytes: shards of about an eighth, a quarter and half the size, a GPU's each,
    then full ones; the records expected are worked out again as the data goes (the first records here are
    shorter than the rest), so the last shards shrink as the data runs out. A takeover cuts the same again."""
    data = b"n,text\n" + b"".join(b"%d,row %d\n" % (n, n) for n in range(1, 40_001))
    params = processors.get("test-slow-echo").validate_params({})
    job = make_job(organisation, State.STAGING, work="test-slow-echo", params=params, source_name="d.csv", gpus=2)
    _, made = followed(job, data)
    sizes = [shard["record_count"] for shard in made]
    full = max(sizes)
    assert sizes[0] == sizes[1] < sizes[2] == sizes[3] < sizes[4] == sizes[5] < sizes[6] == full, sizes
    assert sizes[0] <= full // 4 and sizes[-1] < full // 4, sizes
    assert all(a >= b for a, b in itertools.pairwise(sizes[6:])), "smaller to the end"
    assert followed(job, data)[1] == made
    begun_before_the_ramp = {"shard_records": full, "expected_records": 40_000}  # no expected_bytes in its layout
    assert {shard["record_count"] for shard in followed(job, data, begun_before_the_ramp)[1][:6]} == {full}


@pytest.mark.django_db
def test_a_fixed_job_whose_slot_found_nothing_staged_goes_back_to_the_queue_whole(organisation, online_slots):
    """A fixed request runs on its whole width or waits for it: when one slot finds no staged shard, the
    others are asked back at their shard boundaries, and the job waits in the queue, holding nothing."""
    job = make_job(organisation, State.QUEUED, gpus=2, streaming=True, stream_ready=True)
    Shard.objects.create(
        job=job, index=0, first_record=1, record_count=10, first_line=2, start_byte=0, end_byte=10,
        status=Shard.Status.RUNNING,
    )  # fmt: skip
    assert lifecycle.start_hold(job, online_slots[:2])
    idle, busy = job.allocations.order_by("pk")
    assert lifecycle.give_back(idle.pk, idle=True), "no staged shard for it"
    busy.refresh_from_db()
    assert busy.held_to is None and busy.give_back, "asked back at its shard boundary, its shard run to the end"
    assert refreshed(job).state == State.RUNNING
    Shard.objects.create(job=job, index=1, first_record=11, record_count=10, first_line=12, start_byte=10, end_byte=20)
    assert lifecycle.give_back(busy.pk), "at its boundary, though a shard was staged meanwhile: one is not enough"
    assert refreshed(job).state == State.QUEUED and not job.allocations.filter(held_to=None).exists()
    assert job.events.filter(message__contains="a fixed request runs on all of them").exists()


@pytest.mark.django_db(transaction=True)
def test_a_compressed_source_streams_and_counts_its_staging_in_bytes_as_sent(fleet, partner_client, paused_server):
    """A gzip CSV's uncompressed size is known only at its end: its staging counts the bytes as sent against
    the length the server announced, so the page's percent staged is of the data on the wire, not 0."""
    _Paused.data = gzip.compress(CSV)
    job = submit(partner_client, paused_server, name="numbers.csv.gz", request_kind="flexible")
    wait_for(lambda: job.shards.filter(status=Shard.Status.DONE).exists(), what="a shard done while data arrives")
    assert refreshed(job).streaming and job.staging_total == len(_Paused.data)
    assert 80 <= job.staging_percent <= 85, "as far as the source has sent"
    staged = re.search(r"(\d+) % of the data staged", partner_client.get(f"/jobs/{job.pk}/").text)
    assert staged and 80 <= int(staged[1]) <= 85
    _Paused.release.set()
    job = wait_for_end(job)
    assert job.state == State.SUCCEEDED, job.error
    assert (job.records_total, job.input_bytes, job.sent_bytes) == (RECORDS, len(CSV), len(_Paused.data))
    assert job.input_compression == "gzip" and job.input_sha256 == hashlib.sha256(_Paused.data).hexdigest()


@pytest.mark.django_db
def test_a_source_of_unknown_size_shows_the_bytes_staged_so_far(organisation, partner_client):
    """A dataset of several parts is known in size only once every part is in: meanwhile its page and the API
    say how much is staged in bytes, never "0 %"."""
    job = make_job(organisation, State.QUEUED, streaming=True, staging_done=12_500_000, staging_total=None)
    assert job.staged_so_far == "12.5\xa0MB"
    page = partner_client.get(f"/jobs/{job.pk}/").text
    assert "Staging goes on: 12.5\xa0MB of the data staged" in page.replace("&nbsp;", "\xa0")
    progress = job_json(job)["progress"]
    assert progress["staging_percent"] is None and progress["staged_bytes"] == 12_500_000


@pytest.mark.django_db
def test_a_staging_called_inside_a_transaction_stages_the_whole_copy_first(partner_client, online_slots):
    """The follower's thread has a database connection of its own: inside the caller's transaction it could
    neither see the job's rows (PostgreSQL) nor take the write lock (SQLite). Such a staging (a command's, a
    test's) copies the data whole, then describes and cuts it, at once, not after a lock's timeout."""
    form = job_form(CSV, name="numbers.csv", work="test-slow-echo", gpus="2")
    form["param-test-slow-echo-seconds_per_batch"] = "0"
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = Job.objects.get()
    assert not streaming.streams(job)
    stage.stage(job.pk)
    job.refresh_from_db()
    assert (job.state, job.streaming, job.records_total) == (State.QUEUED, False, RECORDS)
    assert sum(job.shards.values_list("record_count", flat=True)) == RECORDS
