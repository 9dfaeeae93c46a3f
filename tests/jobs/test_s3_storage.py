"""The same pass with job storage on S3 (django-storages), against a real S3-compatible server on
loopback (moto's server mode) that the web side and the worker processes both talk to."""

import csv
import functools
import hashlib
import http.server
import io
import os
import re
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.test import override_settings
from storages.backends.s3 import S3Storage

from jobs.models import Job, State
from jobs.processors.onnx_infer import _ModelCopies
from jobs.staging import fastcsv, ranged, stage
from jobs.staging.progress import StagingProgress
from jobs.staging.staged_copy import copy_to_job_storage
from tests.factories import make_job
from tests.support import EXAMPLE, OutputZip, Worker, job_form, s3_on_loopback, wait_for, wait_for_end, wait_for_slots

pytestmark = pytest.mark.django_db(transaction=True)

BUCKET = "e31-test-jobs"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_on_loopback() as (endpoint, client):
        for name, value in CREDENTIALS.items():
            os.environ.setdefault(name, value)
        client.create_bucket(Bucket=BUCKET)
        yield endpoint


def _s3_storages(endpoint: str) -> dict:
    return {
        "default": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {"bucket_name": BUCKET, "endpoint_url": endpoint, "file_overwrite": False},
        },
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        "ledger": settings.STORAGES["ledger"],
    }


def _client_credentials() -> dict:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


@pytest.fixture(scope="module")
def s3_worker(s3_endpoint, django_db_setup, redis_server):
    worker = Worker(
        f"s3-{os.getpid()}",
        slots=2,
        E31_STORAGE="s3",
        E31_S3_BUCKET=BUCKET,
        E31_S3_ENDPOINT_URL=s3_endpoint,
        **CREDENTIALS,
    )
    yield worker
    worker.stop()


def test_it_stages_runs_and_returns_the_output_through_s3(s3_endpoint, s3_worker, partner_client):
    wait_for_slots(s3_worker)
    with override_settings(STORAGES=_s3_storages(s3_endpoint)):
        assert partner_client.post("/jobs/new/", job_form()).status_code == 302
        job = wait_for_end(Job.objects.get())
        assert job.state == State.SUCCEEDED, job.error
        archive = OutputZip(partner_client, job)
        signed = partner_client.get(f"/jobs/{job.pk}/output/manifest.json")
    assert signed.status_code == 302, "an output file on S3 downloads through a signed URL"
    url = signed["Location"]
    assert url.startswith(f"{s3_endpoint}/{BUCKET}/{job.output_path}/manifest.json?")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert query["Signature"], url
    assert 0 < int(query["Expires"][0]) - time.time() <= 900, "it expires in E31_OUTPUT_URL_SECONDS"
    with urllib.request.urlopen(url) as download:
        assert download.read() == archive.read("manifest.json")
        assert download.headers["Content-Disposition"] == f'attachment; filename="job-{job.pk}-manifest.json"'

    table = pq.read_table(io.BytesIO(archive.read("output.parquet")))
    rejects = list(csv.DictReader(io.StringIO(archive.read("rejects.csv").decode())))
    with EXAMPLE.open(encoding="utf-8", newline="") as handle:
        rows = sum(1 for _ in csv.DictReader(handle))
    assert sorted(table.column("_record").to_pylist() + [int(r["record"]) for r in rejects]) == list(range(1, rows + 1))

    bucket = boto3.client("s3", endpoint_url=s3_endpoint, **_client_credentials())

    def keys() -> set[str]:
        return {item["Key"] for item in bucket.list_objects_v2(Bucket=BUCKET)["Contents"]}

    wait_for(lambda: Job.objects.get(pk=job.pk).staged_purged_at, timeout=10, what="the staged copy's purge")
    # The purge is recorded, then the object deleted: the bucket is read once it is gone.
    wait_for(lambda: job.staged_path not in keys(), timeout=10, what="the staged copy purged, as chosen")
    assert {f"{job.output_path}/{name}" for name in ("output.parquet", "rejects.csv", "manifest.json")} <= keys()
    assert not any(key.startswith("uploads/") for key in keys()), "the upload was removed once staged"


def test_a_slot_reads_only_its_part_of_a_staged_copy_on_s3(s3_endpoint, monkeypatch):
    data = bytes(range(256)) * 80_000  # 20 MB
    table = pa.table({"n": list(range(100_000))})
    with override_settings(STORAGES=_s3_storages(s3_endpoint)):
        path = default_storage.save("ranged/data.bin", ContentFile(data))
        sink = io.BytesIO()
        pq.write_table(table, sink, row_group_size=10_000)
        parquet_path = default_storage.save("ranged/data.parquet", ContentFile(sink.getvalue()))
        with ranged.open_for_ranges(path) as staged:
            asked = []
            fetch = staged.raw.client.get_object
            monkeypatch.setattr(staged.raw.client, "get_object", lambda **kw: asked.append(kw["Range"]) or fetch(**kw))
            staged.seek(12_345_678)
            assert staged.read(1_000_000) == data[12_345_678:13_345_678]
        assert asked and all(_span(rng) <= 8 * 1024 * 1024 for rng in asked), asked
        with ranged.open_for_ranges(parquet_path) as staged:
            rows = pq.ParquetFile(staged).read_row_group(7).column("n").to_pylist()
        assert rows == list(range(70_000, 80_000))


def _span(header: str) -> int:
    start, end = header.removeprefix("bytes=").split("-")
    return int(end) - int(start) + 1


def test_staging_a_csv_on_s3_never_downloads_the_staged_copy_whole(s3_endpoint, organisation, monkeypatch):
    """The copy is scanned as it is stored; what staging reads back (the head, the type sample) is
    fetched by range, not by django-storages' download of the whole object. The job asks for more
    slots than the module's worker has, so it stays queued and no slot reads the copy meanwhile."""
    monkeypatch.setattr(fastcsv, "MIN_BLOCK", 1024)
    data = b"id,name,score\n" + b"".join(b'%d,"name %d",%d.5\n' % (n, n, n) for n in range(5000))
    opened = []
    original = S3Storage._open

    def noted(storage, name, mode="rb"):
        opened.append(name)
        return original(storage, name, mode)

    monkeypatch.setattr(S3Storage, "_open", noted)
    with override_settings(STORAGES=_s3_storages(s3_endpoint)):
        path = default_storage.save("uploads/data.csv", ContentFile(data))
        job = make_job(organisation, source_name="data.csv", source_path=path, gpus=3)
        stage.stage(job.pk)
        job.refresh_from_db()
        assert job.state == State.QUEUED, job.error
        assert job.records_total == 5000 and job.shards.count() > 1
        assert [column["type"] for column in job.plan["columns"]] == ["int", "string", "float"]
        assert job.staged_path not in opened, "the staged copy was read by range"
        default_storage.delete(job.staged_path)


def test_local_copies_of_models_on_s3_are_few_and_deleted_when_dropped(s3_endpoint):
    """A slot runs job after job, each with a model of its own: onnxruntime needs a file, so the
    model is copied out of S3, and only the last few copies stay on the machine."""
    copies = _ModelCopies()
    with override_settings(STORAGES=_s3_storages(s3_endpoint)):
        names = [default_storage.save(f"models/m{n}.onnx", ContentFile(b"model %d" % n)) for n in range(6)]
        try:
            locals_ = [copies.get(name) for name in names]
            assert [Path(local).read_bytes() for local in locals_[2:]] == [b"model %d" % n for n in range(2, 6)]
            assert not any(Path(local).exists() for local in locals_[:2]), "the two used longest ago are gone"
            assert copies.get(names[2]) == locals_[2], "a kept copy is used again, not fetched again"
            again = copies.get(names[0])
            assert Path(again).read_bytes() == b"model 0"
            assert not Path(locals_[3]).exists(), "model 3 was then the one used longest ago"
            copies.clear()
            assert not any(Path(local).exists() for local in [*locals_, again]), "and at exit, none is left"
        finally:
            for name in names:
                default_storage.delete(name)
            copies.clear()


def test_a_download_staged_into_s3_goes_up_in_parts(s3_endpoint, organisation, tmp_path):
    """A download arrives in the socket's chunks; storage still gets whole reads, or django-storages
    would take the first short one for the end and send the dataset in one request, held in memory."""
    data = b"id,name\n" + b"".join(b"%d,name %d\n" % (n, n) for n in range(1_000_000))  # 17 MB: parts of 8 MiB
    (tmp_path / "big.csv").write_bytes(data)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    job = make_job(
        organisation, State.STAGING, source_kind=Job.Source.URL, source_name="big.csv",
        source_uri=f"http://localhost:{server.server_address[1]}/big.csv", staging_claim="attempt",
    )  # fmt: skip
    try:
        with override_settings(STORAGES=_s3_storages(s3_endpoint)):
            path, size, sha256, _ = copy_to_job_storage(
                job, f"{job.storage_prefix}/input/big.csv", StagingProgress(job.pk, "attempt")
            )
            client = boto3.client("s3", endpoint_url=s3_endpoint, **_client_credentials())
            staged = client.get_object(Bucket=BUCKET, Key=path)
            assert staged["Body"].read() == data
            assert (size, sha256) == (len(data), hashlib.sha256(data).hexdigest())
            assert re.fullmatch(r'"[0-9a-f]+-[2-9]"', staged["ETag"]), "uploaded in parts (its ETag counts them)"
            default_storage.delete(path)
    finally:
        server.shutdown()
