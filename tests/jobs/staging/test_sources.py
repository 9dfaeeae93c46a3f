"""Data from a server path under a staging root, or from an HTTP(S) URL: refused when outside what
the operator allows, staged like an upload when inside, with the staging on the ledger."""

import errno
import hashlib
import http.server
import io
import json
import os
import shutil
import threading
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.core.files.storage import default_storage
from django.db import connection
from django.test import override_settings

from billing.models import LedgerEntry
from jobs import uploads
from jobs.models import Job, State
from jobs.reconcile import reconcile
from jobs.staging import s3, sources, stage, staged_copy
from jobs.staging.progress import StagingProgress
from jobs.staging.staged_copy import copy_to_job_storage
from tests.factories import make_job
from tests.support import EXAMPLE, job_form, wait_for_end


@pytest.fixture
def root() -> Path:
    """The partner organisation's own staging folder."""
    root = settings.E31_STAGING_ROOTS[0] / "partner-lab"
    root.mkdir(parents=True, exist_ok=True)
    yield root
    shutil.rmtree(settings.E31_STAGING_ROOTS[0])


def test_it_finds_a_file_in_the_organisations_staging_folder(root):
    (root / "data.csv").write_bytes(b"a,b\n1,2\n")
    assert sources.server_path(str(root / "data.csv"), "partner-lab") == (root / "data.csv")


@pytest.mark.parametrize(
    "make",
    [
        lambda root: "relative/data.csv",
        lambda root: str(root / "missing.csv"),
        str,  # a folder
        lambda root: "/etc/passwd",
        lambda root: str(root / ".." / ".." / "secret.csv"),
        lambda root: str(root / "link.csv"),  # a link to a file outside
        lambda root: str(root.parent / "other-lab" / "their.csv"),  # another organisation's folder
        lambda root: str(root / ".." / "other-lab" / "their.csv"),
    ],
)
def test_it_refuses_paths_outside_the_organisations_folder_with_one_message(root, tmp_path, make):
    secret = root.parent.parent / "secret.csv"
    secret.write_bytes(b"a,b\n1,2\n")
    (root.parent / "other-lab").mkdir()
    (root.parent / "other-lab" / "their.csv").write_bytes(b"a,b\n1,2\n")
    (tmp_path / "outside.csv").write_bytes(b"a,b\n1,2\n")
    (root / "link.csv").symlink_to(tmp_path / "outside.csv")
    try:
        with pytest.raises(sources.SourceError, match="is not a readable file in your staging folders"):
            sources.server_path(make(root), "partner-lab")
    finally:
        secret.unlink()


@override_settings(E31_MAX_DATASET_BYTES=5)
def test_it_refuses_a_server_file_over_the_dataset_limit(root):
    (root / "big.csv").write_bytes(b"a,b\n1,2\n")
    with pytest.raises(sources.SourceError, match=r"big\.csv is 8 bytes, more than the 5-byte"):
        sources.server_path(str(root / "big.csv"), "partner-lab")


@override_settings(E31_STAGING_ROOTS=[])
def test_it_refuses_server_paths_when_no_root_is_set():
    with pytest.raises(sources.SourceError, match="the operator has set no staging roots"):
        sources.server_path("/srv/data.csv", "partner-lab")


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("http://127.0.0.1/data.csv", "127.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("ftp://example.com/data.csv", "http"),
        ("s3://bucket/data.csv", "Give credentials that can read s3://bucket/"),
        ("s3://Bucket_1/data.csv", "is not an S3 URI"),
        ("s3://bucket", "names a bucket but no object"),
        ("/etc/passwd", "is not a readable file in your staging folders"),
        ("https://data.example/\u202evsc.csv", "The location contains U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("s3://bucket/data\u200b.csv", "The location contains U+200B ZERO WIDTH SPACE"),
        ("/srv/e31/partner-lab/a\u2066.csv", "The location contains U+2066 LEFT-TO-RIGHT ISOLATE"),
        ("https://data.example/a\tb.csv", "The location contains U+0009, an invisible or control character"),
    ],
)
@pytest.mark.django_db
def test_it_refuses_a_location_in_the_form(partner_client, online_slots, location, message):
    form = job_form(location=location)
    del form["data"]
    response = partner_client.post("/jobs/new/", form)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Job.objects.exists()


def test_it_keeps_a_location_as_typed_and_refuses_one_with_a_hidden_character_rather_than_clean_it(root):
    (root / "cafe\u0301 \u0645\u06cc\u200c\u062e.csv").write_bytes(b"a,b\n1,2\n")
    sources.check(str(root / "cafe\u0301 \u0645\u06cc\u200c\u062e.csv"), "partner-lab")
    (root / "data.csv").write_bytes(b"a,b\n1,2\n")
    with pytest.raises(sources.SourceError, match=r"contains U\+FEFF ZERO WIDTH NO-BREAK SPACE"):
        sources.check(str(root / "data.csv\ufeff"), "partner-lab")


@pytest.mark.django_db
def test_it_wants_the_data_one_way(partner_client, online_slots):
    form = job_form()
    del form["data"]
    none = partner_client.post("/jobs/new/", form).context["form"].errors
    assert none["data"] == ["Give the data one way: upload a file, or give a URL or a server path."]
    both = partner_client.post("/jobs/new/", job_form(location="http://localhost/data.csv")).context["form"].errors
    assert both["location"] == none["data"], "the service's sentence, by the field given second"
    assert not Job.objects.exists()


@pytest.fixture
def http_server():
    """A plain HTTP server on loopback serving examples/, reached as `localhost` (allowed in tests)."""
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(EXAMPLE.parent))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{server.server_address[1]}"
    server.shutdown()


def assert_staged_like_the_example(job: Job, kind: str):
    assert job.state == State.SUCCEEDED, job.error
    assert job.source_kind == kind
    assert job.input_bytes == EXAMPLE.stat().st_size
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        assert pq.read_table(output).num_rows == job.records_out == 4992
    staging = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.STAGING)
    assert (staging.bytes, staging.source_kind, staging.gpus, staging.amount) == (job.input_bytes, kind, 0, 0)
    staged_at = job.events.get(state=State.QUEUED).at
    assert staging.held_to <= staged_at and staging.held_from >= job.events.get(state=State.STAGING).at
    with default_storage.open(f"{job.output_path}/manifest.json", "rb") as handle:
        manifest = json.load(handle)
    assert manifest["input"]["source"] == kind and manifest["input"]["sha256"] == job.input_sha256
    assert manifest["staging"]["finished"] == staged_at.isoformat() and manifest["staging"]["mb_per_s"] > 0
    assert sum(shard["bytes"] for shard in manifest["shards"]) == job.input_bytes - job.layout["data_offset"]


@pytest.mark.django_db(transaction=True)
def test_it_stages_and_runs_a_job_from_a_url_and_keeps_no_signature_of_it(fleet, partner_client, http_server):
    """A pre-signed URL's query is a credential: used to download, then never shown, recorded or kept."""
    form = job_form(location=f"{http_server}/customers.csv?X-Amz-Signature=s3cr3t&X-Amz-Expires=600#top")
    del form["data"]
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get())
    assert_staged_like_the_example(job, "url")
    assert job.source_name == "customers.csv"
    assert job.source_uri == f"{http_server}/customers.csv?…"
    assert "s3cr3t" not in partner_client.get(f"/jobs/{job.pk}/").content.decode()
    with default_storage.open(f"{job.output_path}/manifest.json", "rb") as handle:
        assert json.load(handle)["input"]["location"] == f"{http_server}/customers.csv?…"


@pytest.mark.django_db
def test_a_job_that_ended_before_it_staged_has_its_upload_and_secrets_wiped_by_the_safety_net(
    organisation, monkeypatch
):
    """Cancelled while its staging message was lost with Redis: no staging attempt ever wipes them."""
    common = {"organisation": organisation, "work": "clean-table", "gpus": 1, "hours": 1, "source_name": "c.csv"}
    signed = Job.objects.create(
        **common, state=State.CANCELLED, source_kind=Job.Source.URL, source_uri="https://example.com/c.csv?sig=s3cr3t"
    )
    sealed = Job.objects.create(
        **common, state=State.CANCELLED, source_kind=Job.Source.S3, source_uri="s3://partner-data/c.csv",
        source_secret=s3.seal({"access_key_id": "k", "secret_access_key": "s3cr3t"}),
    )  # fmt: skip
    upload = uploads.store_upload(io.BytesIO(b"a,b\n1,2\n"), "c.csv")
    uploaded = Job.objects.create(**common, state=State.CANCELLED, source_path=upload)
    waiting = Job.objects.create(
        **common, state=State.SUBMITTED, source_kind=Job.Source.URL, source_uri="https://example.com/c.csv?sig=s3cr3t"
    )
    parts = ["https://example.com/c-1.csv", "https://example.com/c-2.csv?sig=s3cr3t"]  # the first part unsigned
    parted = Job.objects.create(
        **common, state=State.CANCELLED, source_kind=Job.Source.URL, source_uri=parts[0],
        source_parts=[{"location": location} for location in parts],
    )  # fmt: skip
    Job.objects.create(  # its parts' queries wiped already: nothing to do
        **common, state=State.CANCELLED, source_kind=Job.Source.URL, source_uri=parts[0],
        source_parts=[{"location": parts[0]}, {"location": "https://example.com/c-2.csv?…"}],
    )  # fmt: skip
    forgotten = []
    monkeypatch.setattr(sources, "forget", lambda job, forget=sources.forget: forgotten.append(job.pk) or forget(job))
    monkeypatch.setattr("jobs.reconcile.FORGET_BATCH", 2)
    reconcile()
    assert len(forgotten) == 2, "a batch at a time"
    reconcile()
    reconcile()
    assert sorted(forgotten) == sorted([signed.pk, sealed.pk, uploaded.pk, parted.pk]), "each once: not wiped again"
    assert [part["location"] for part in Job.objects.get(pk=parted.pk).source_parts] == [
        parts[0], "https://example.com/c-2.csv?…"
    ]  # fmt: skip
    assert not default_storage.exists(upload) and Job.objects.get(pk=uploaded.pk).source_path == ""
    assert Job.objects.get(pk=signed.pk).source_uri == "https://example.com/c.csv?…"
    assert Job.objects.get(pk=sealed.pk).source_secret == ""
    assert Job.objects.get(pk=waiting.pk).source_uri.endswith("?sig=s3cr3t"), "its staging still needs it"


@pytest.mark.django_db(transaction=True)
def test_it_stages_and_runs_a_job_from_a_server_path(fleet, partner_client, root):
    shutil.copy(EXAMPLE, root / "customers.csv")
    form = job_form(location=str(root / "customers.csv"))
    del form["data"]
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get())
    assert_staged_like_the_example(job, "path")
    assert (root / "customers.csv").exists(), "the partner's own file is left where it was"


@pytest.mark.django_db(transaction=True)
def test_it_fails_a_url_that_answers_404_and_holds_nothing(fleet, partner_client, http_server):
    form = job_form(location=f"{http_server}/missing.csv")
    del form["data"]
    partner_client.post("/jobs/new/", form)
    job = wait_for_end(Job.objects.get())
    assert job.state == State.FAILED
    assert job.error.startswith("Staging failed:") and "404" in job.error
    assert not job.allocations.exists()


class _Drops(http.server.BaseHTTPRequestHandler):
    """Sends half of the example, then hangs up; asked to resume, sends it all again (no Range)."""

    def do_GET(self):
        body = EXAMPLE.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.close_connection = True

    def log_message(self, *args):
        return


@pytest.mark.django_db(transaction=True)
def test_a_download_that_breaks_and_cannot_resume_fails_and_leaves_nothing_staged(fleet, partner_client):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Drops)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        form = job_form(location=f"http://localhost:{server.server_address[1]}/customers.csv")
        del form["data"]
        partner_client.post("/jobs/new/", form)
        job = wait_for_end(Job.objects.get())
    finally:
        server.shutdown()
    assert job.state == State.FAILED
    assert job.error == (
        "Staging failed: The connection to localhost dropped and it cannot resume (it sent the whole file again)."
    )
    staged = f"{job.storage_prefix}/input"
    assert not default_storage.exists(staged) or default_storage.listdir(staged) == ([], []), "no partial copy kept"


@pytest.mark.django_db(transaction=True)
def test_staging_checks_the_checksum_given_with_the_job(fleet, partner_client, http_server):
    right = hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    wrong = "0" * 64
    form = job_form(location=f"{http_server}/customers.csv", sha256=wrong)
    del form["data"]
    partner_client.post("/jobs/new/", form)
    job = wait_for_end(Job.objects.get())
    assert job.state == State.FAILED
    assert job.error == (
        f"Staging failed: checksum mismatch: the data's SHA-256 is {right}, not the {wrong} given with the job."
    )
    assert not job.allocations.exists()
    Job.objects.all().delete()
    partner_client.post("/jobs/new/", job_form(sha256=right.upper()))
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["abc", "g" * 64, "0" * 63, "0" * 65])
def test_the_form_refuses_a_checksum_that_is_no_sha256(partner_client, online_slots, value):
    response = partner_client.post("/jobs/new/", job_form(sha256=value))
    assert response.status_code == 400
    assert f"A SHA-256 is 64 hexadecimal digits, not &#x27;{value}&#x27;." in response.content.decode()
    assert not Job.objects.exists()


def test_a_download_reads_as_a_file_does_and_stops_when_staging_stops_reading():
    body = sources._Body()
    chunks = [b"a" * 10, b"b" * 5, b"", b"c" * 3, b"d" * 4]
    for chunk in chunks:
        body.write(chunk)
    body.finish()
    assert body.read(10) is chunks[0], "a chunk that is just what was asked for is handed over, not copied"
    assert body.read(6) == b"bbbbbc", "a read is filled from the chunks after (S3 storage needs whole parts)"
    assert (body.read(-1), body.read(1), body.read(1)) == (b"ccdddd", b"", b"")

    body = sources._Body()
    for chunk in chunks:
        body.write(chunk)
    body.finish()
    assert body.read1(1024) is chunks[0], "for filesystem storage, each chunk as it came: no bytes joined"
    assert [body.read1(4), body.read1(4), body.read1(4), body.read1(4), body.read1(4)] == [
        b"bbbb",
        b"b",
        b"ccc",
        b"dddd",
        b"",
    ]

    stopped = sources._Body()
    failed = []

    def download() -> None:
        try:
            while True:
                stopped.write(b"x" * 100)
        except OSError as error:
            failed.append(error)

    writer = threading.Thread(target=download)
    writer.start()
    assert stopped.read(10) == b"x" * 10
    stopped.close()  # staging stopped (cancelled, or storage failed) with the queue full
    writer.join(timeout=5)
    assert not writer.is_alive() and failed, "the download thread was told, not left blocked"


def staging_from(organisation, path: Path) -> tuple[Job, StagingProgress]:
    job = make_job(
        organisation, State.STAGING, source_kind=Job.Source.PATH, source_uri=str(path), source_name=path.name,
        staging_claim="attempt",
    )  # fmt: skip
    return job, StagingProgress(job.pk, "attempt")


def several_chunks(path: Path) -> bytes:
    data = b"id,name\n" + b"".join(b"%d,name %d\n" % (n, n) for n in range(300_000))  # ~5 MB
    path.write_bytes(data)
    return data


@pytest.mark.parametrize(
    "kernel",
    ["copies", "cannot copy between these filesystems", "copies nothing (FUSE)", "stops copying halfway"],
)
def test_a_server_file_is_staged_byte_for_byte_by_the_kernel_or_by_writes(organisation, root, monkeypatch, kernel):
    data = several_chunks(root / "big.csv")
    copied, copy_range = [], os.copy_file_range

    def noted(source, out, count, offset, at):
        if kernel.startswith("cannot") or (kernel.startswith("stops") and len(copied) == 2):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        if kernel.startswith("copies nothing"):
            return 0
        copied.append(count)
        return copy_range(source, out, count, offset, at)

    monkeypatch.setattr(os, "copy_file_range", noted)
    job, progress = staging_from(organisation, root / "big.csv")
    path, size, sha256, scanned = copy_to_job_storage(job, f"{job.storage_prefix}/input/big.csv", progress)
    try:
        with default_storage.open(path) as staged:
            assert staged.read() == data
        assert (size, sha256, scanned.records) == (len(data), hashlib.sha256(data).hexdigest(), 300_000)
        assert sum(copied) == {"copies": len(data), "stops copying halfway": 2 * 1024 * 1024}.get(kernel, 0)
    finally:
        default_storage.delete(path)


def test_a_server_file_that_changes_while_it_is_staged_fails_its_staging(organisation, root, monkeypatch):
    several_chunks(root / "big.csv")
    copy_range, appended = os.copy_file_range, []

    def and_append(source, out, count, offset, at):
        if not appended:  # a record added by someone still writing the file
            with (root / "big.csv").open("ab") as more:
                appended.append(more.write(b"1,late\n"))
        return copy_range(source, out, count, offset, at)

    monkeypatch.setattr(os, "copy_file_range", and_append)
    job, progress = staging_from(organisation, root / "big.csv")
    with pytest.raises(sources.SourceError, match="The file changed while it was staged"):
        copy_to_job_storage(job, f"{job.storage_prefix}/input/big.csv", progress)
    default_storage.delete(f"{job.storage_prefix}/input/big.csv")


def refused(*args, error=errno.ENOSPC):
    raise OSError(error, os.strerror(error))


def broken(*args):
    raise RuntimeError("a bug of ours")


def staged_files(job: Job) -> set[str]:
    folder = f"{job.storage_prefix}/input"
    return set(default_storage.listdir(folder)[1]) if default_storage.exists(folder) else set()


def stage_and_close(job_id: int) -> None:
    try:
        stage.stage(job_id)
    finally:
        connection.close()


FULL = "Staging failed: could not read or store the data (No space left on device)."
BUG = "Staging failed: an internal error (RuntimeError); the operators can see it."


@pytest.mark.parametrize(
    "copy_range, write, direct_from, message",
    [
        (refused, refused, staged_copy.DIRECT_FROM, FULL),
        (partial(refused, error=errno.EXDEV), refused, staged_copy.DIRECT_FROM, FULL),
        (partial(refused, error=errno.EXDEV), broken, staged_copy.DIRECT_FROM, BUG),
        (refused, refused, 0, FULL),
    ],
    ids=["the kernel's copy", "writes", "a bug in the writes", "direct writes"],
)
@pytest.mark.django_db(transaction=True)  # staged from a thread of its own, on its own connection
def test_a_copy_that_cannot_be_written_fails_its_staging_and_leaves_nothing(
    organisation, root, monkeypatch, copy_range, write, direct_from, message
):
    """The copy is written on a thread beside the reading one: a full disk there, or a bug, fails the
    staging with the reason, and the reading thread is not left waiting on it (24 MB: more pieces
    than the writer's queue and the reading thread's buffers hold)."""
    (root / "big.csv").write_bytes(b"id,name\n" + b"1,a\n" * 6_000_000)
    monkeypatch.setattr(staged_copy, "DIRECT_FROM", direct_from)
    monkeypatch.setattr(os, "copy_file_range", copy_range)
    monkeypatch.setattr(os, "pwrite", write)
    job, _ = staging_from(organisation, root / "big.csv")
    Job.objects.filter(pk=job.pk).update(state=State.SUBMITTED, staging_claim="")
    stored = staged_files(job)
    staging = threading.Thread(target=stage_and_close, args=(job.pk,), daemon=True)
    staging.start()
    staging.join(timeout=60)
    assert not staging.is_alive(), "the reading thread waits on a writer that has stopped"
    job.refresh_from_db()
    assert (job.state, job.error) == (State.FAILED, message)
    assert staged_files(job) == stored, "no part of the copy is kept"
    assert not [thread for thread in threading.enumerate() if thread.name == "e31-write-along"]


def test_a_download_that_fails_on_our_side_fails_its_staging_rather_than_keep_a_part(organisation, monkeypatch):
    def cut_short(url, dest, *, on_length, **options):
        on_length(None)
        dest.write(b"id,name\n1,a\n")
        raise RuntimeError("a bug of ours, halfway")

    monkeypatch.setattr(sources.fetch, "fetch", cut_short)
    job, progress = staging_from(organisation, Path("unused"))
    Job.objects.filter(pk=job.pk).update(source_kind=Job.Source.URL, source_uri="http://localhost/data.csv")
    job.refresh_from_db()
    with pytest.raises(sources.SourceError, match="The download failed on our side"):
        copy_to_job_storage(job, f"{job.storage_prefix}/input/data.csv", progress)
    default_storage.delete(f"{job.storage_prefix}/input/data.csv")
