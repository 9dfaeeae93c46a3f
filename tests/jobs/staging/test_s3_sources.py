"""Staging from S3 (`s3://bucket/key`) against a real S3-compatible server on loopback (moto's server
mode): the partner's bucket with credentials given for the job, the operator's bucket under the
organisation's folder, and every way it can go wrong, each with a clear reason on the job."""

import hashlib
import io
import os
import tempfile
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ResponseStreamingError
from moto.core.authorization import enable_iam_authentication

from billing.models import LedgerEntry
from jobs.models import Job, State
from jobs.staging import s3, s3_reads, sources
from jobs.staging.progress import StagingProgress
from jobs.staging.staged_copy import copy_to_job_storage
from portal import onboarding
from portal.models import Application
from tests.datasets import picture
from tests.factories import make_job
from tests.support import EXAMPLE, Worker, client_for, job_form, s3_on_loopback, wait_for_end, wait_for_slots

CREDENTIALS = {"access_key_id": "partner-key", "secret_access_key": "partner-secret-value"}
PORTAL_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "portal",
    "AWS_SECRET_ACCESS_KEY": "portal",
    "AWS_DEFAULT_REGION": "us-east-1",
}
LIMIT = 30_000_000
BIG = b"id,text\n" + b"".join(b"%d,a record of the ranged read test %d\n" % (n, n) for n in range(500_000))


def _parquet(rows: range) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": list(rows), "text": [f"row {n}" for n in rows]}), sink)
    return sink.getvalue()


PREFIXES = {
    "photos/a.png": picture(),
    "photos/b.png": picture((300, 200)),
    "photos/sub/c.jpg": picture(kind="JPEG"),
    "parts/part-0.csv": b"id,text\n" + b"".join(b"%d,row %d\n" % (n, n) for n in range(0, 700)),
    "parts/part-1.csv": b"id,text\r\n" + b"".join(b"%d,row %d\n" % (n, n) for n in range(700, 1500)).rstrip(b"\n"),
    "jsonl/a.jsonl": b"".join(b'{"id": %d}\n' % n for n in range(300)),
    "jsonl/b.jsonl": b"".join(b'{"id": %d}\n' % n for n in range(300, 500)),
    "pq/part-0.parquet": _parquet(range(0, 600)),
    "pq/part-1.parquet": _parquet(range(600, 1000)),
    "pq/_SUCCESS": b"",  # hidden files, as Spark and Hadoop write them, are left aside
    "pq/.part-1.parquet.crc": b"\x00\x01",
    "badparts/part-0.csv": b"id,text\n1,a\n",
    "badparts/part-1.csv": b"id,name\n2,b\n",
    "mixed/a.csv": b"id,text\n1,a\n",
    "mixed/b.png": picture(),
}


@pytest.fixture(scope="module")
def s3_server():
    with s3_on_loopback() as (endpoint, client):
        for bucket in ("partner-data", "portal-lake"):
            client.create_bucket(Bucket=bucket)
        client.put_object(Bucket="partner-data", Key="exports/customers.csv", Body=EXAMPLE.read_bytes())
        client.put_object(Bucket="partner-data", Key="exports/big.csv", Body=BIG)
        client.put_object(Bucket="partner-data", Key="exports/huge.csv", Body=BIG + BIG[: LIMIT - len(BIG) + 1])
        client.put_object(Bucket="portal-lake", Key="partner-lab/customers.csv", Body=EXAMPLE.read_bytes())
        for name, body in PREFIXES.items():
            client.put_object(Bucket="partner-data", Key=name, Body=body)
        yield endpoint


@pytest.fixture(scope="module")
def s3_source_worker(s3_server, django_db_setup, redis_server):
    worker = Worker(
        f"s3src-{os.getpid()}",
        slots=2,
        E31_STAGING_S3_ENDPOINT_URL=s3_server,
        E31_STAGING_S3_BUCKETS="portal-lake",
        E31_MAX_DATASET_BYTES=str(LIMIT),
        **PORTAL_CREDENTIALS,
    )
    yield worker
    worker.stop()


@pytest.fixture
def s3_fleet(s3_source_worker, transactional_db):
    return wait_for_slots(s3_source_worker)


@pytest.fixture(autouse=True)
def portal_bucket(settings):
    """The web side checks locations against the operator's buckets as the worker does."""
    settings.E31_STAGING_S3_BUCKETS = ["portal-lake"]


def submit(client, location: str, credentials: dict | None = None):
    form = job_form(location=location)
    del form["data"]
    for name, value in (credentials or {}).items():
        form[f"s3_{name}"] = value
    return client.post("/jobs/new/", form)


def staged(client, location: str, credentials: dict | None = None) -> Job:
    response = submit(client, location, credentials)
    assert response.status_code == 302, response.content.decode()
    return wait_for_end(Job.objects.get())


@pytest.mark.django_db(transaction=True)
def test_it_stages_from_the_partners_bucket_with_their_credentials_then_wipes_them(
    s3_fleet, partner_client
):  # fmt: skip
    job = staged(partner_client, "s3://partner-data/exports/customers.csv", CREDENTIALS)
    assert job.state == State.SUCCEEDED, job.error
    assert (job.source_kind, job.source_name) == (Job.Source.S3, "customers.csv")
    assert job.input_sha256 == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert job.source_secret == "", "the credentials are wiped once staged"
    entry = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.STAGING)
    assert (entry.source_kind, entry.bytes) == (Job.Source.S3, EXAMPLE.stat().st_size)


@pytest.mark.django_db(transaction=True)
def test_it_reads_a_large_object_in_parallel_ranged_parts(s3_fleet, partner_client):
    assert len(BIG) > 2 * s3_reads.PART_BYTES, "more than two ranged parts"
    job = staged(partner_client, "s3://partner-data/exports/big.csv", CREDENTIALS)
    assert job.state == State.SUCCEEDED, job.error
    assert job.input_sha256 == hashlib.sha256(BIG).hexdigest()
    assert job.records_total == 500_000


@pytest.mark.django_db(transaction=True)
def test_it_stages_from_the_operators_bucket_under_the_organisations_folder(s3_fleet, partner_client):
    job = staged(partner_client, "s3://portal-lake/partner-lab/customers.csv")
    assert job.state == State.SUCCEEDED, job.error
    assert job.input_sha256 == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()


@pytest.mark.django_db(transaction=True)
def test_it_stages_several_objects_as_the_parts_of_one_dataset(s3_fleet, partner_client):
    """Two CSV objects one a line, the later key first: joined in the order given; then a part that is missing,
    named by its place."""
    first, second = "s3://partner-data/parts/part-1.csv", "s3://partner-data/parts/part-0.csv"
    job = staged(partner_client, f"{first}\n{second}", CREDENTIALS)
    assert job.state == State.SUCCEEDED, job.error
    assert job.records_total == job.records_out == 1500
    as_sent = [PREFIXES["parts/part-1.csv"], PREFIXES["parts/part-0.csv"]]
    assert job.parts_shown == [
        {"location": location, "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest(), "compression": None}
        for location, body in zip((first, second), as_sent, strict=True)
    ]
    assert job.input_sha256 == hashlib.sha256(b"".join(as_sent)).hexdigest()
    assert job.source_secret == "", "the credentials are wiped once staged"
    assert submit(partner_client, f"{first}\ns3://partner-data/parts/part-9.csv", CREDENTIALS).status_code == 302
    job = wait_for_end(Job.objects.exclude(pk=job.pk).get())
    assert job.state == State.FAILED and not job.allocations.exists()
    assert job.error.startswith(
        "Staging failed: Part 2 of 2 (s3://partner-data/parts/part-9.csv) could not be staged: "
        "s3://partner-data/parts/part-9.csv does not exist"
    ), job.error


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("location", "credentials", "error"),
    [
        (
            "s3://partner-data/exports/missing.csv",
            CREDENTIALS,
            "Staging failed: s3://partner-data/exports/missing.csv does not exist (404).",
        ),
        (
            "s3://partner-data/exports/huge.csv",
            CREDENTIALS,
            "Staging failed: s3://partner-data/exports/huge.csv is 30,000,001 bytes, more than the 30,000,000-byte",
        ),
        (
            "s3://no-such-bucket-here/data.csv",
            CREDENTIALS,
            "Staging failed: s3://no-such-bucket-here/data.csv does not exist",
        ),
    ],
)
def test_staging_fails_with_what_s3_said(s3_fleet, partner_client, location, credentials, error):
    job = staged(partner_client, location, credentials)
    assert job.state == State.FAILED
    assert job.error.startswith(error), job.error
    assert job.source_secret == ""
    assert not job.allocations.exists()


@pytest.mark.django_db(transaction=True)
def test_access_denied_by_s3_fails_the_job_with_the_reason(s3_fleet, partner_client):
    with enable_iam_authentication():
        job = staged(partner_client, "s3://partner-data/exports/customers.csv", CREDENTIALS)
    assert job.state == State.FAILED
    assert job.error == (
        "Staging failed: S3 refused access to s3://partner-data/exports/customers.csv (403): "
        "check the credentials and the bucket's policy."
    )
    assert job.source_secret == ""
    assert "S3 refused access" in partner_client.get(f"/jobs/{job.pk}/").content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("location", "credentials", "message"),
    [
        (
            "s3://portal-lake/other-lab/customers.csv",
            None,
            "your organisation reads only under s3://portal-lake/partner-lab/",
        ),
        *(
            (location, None, "your organisation reads only under s3://portal-lake/partner-lab/")
            for location in (
                "s3://portal-lake/partner-lab/../other-lab/customers.csv",
                "s3://portal-lake/partner-lab/./",
            )
        ),
        ("s3://partner-data/exports/customers.csv", None, "Give credentials that can read s3://partner-data/"),
        ("s3://partner-data/x.csv", {"access_key_id": "only-the-id"}, "Give the S3 secret access key"),
        ("https://example.com/data.csv", CREDENTIALS, "S3 credentials go with an s3:// location only."),
        *(
            ("s3://partner-data/x.csv", {**CREDENTIALS, "region": region}, f"{region} is not the name of an S3 region")
            for region in ("eu west/1", "-eu-west-1", "eu-west-1/../x")
        ),
    ],
)
def test_the_form_refuses_an_s3_location_it_may_not_read(partner_client, online_slots, location, credentials, message):
    response = submit(partner_client, location, credentials)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Job.objects.exists()


def test_credentials_are_stored_encrypted(settings):
    sealed = s3.seal(CREDENTIALS)
    assert CREDENTIALS["secret_access_key"] not in sealed and "partner-key" not in sealed
    assert s3.unseal(sealed) == CREDENTIALS
    settings.SECRET_KEY = "another portal's key"
    with pytest.raises(s3.S3Error, match="can no longer be read"):
        s3.unseal(sealed)


@pytest.mark.django_db
def test_operators_do_not_see_the_credentials_in_the_admin(organisation, operator):
    sealed = s3.seal(CREDENTIALS)
    job = make_job(
        organisation, source_name="c.csv", source_kind=Job.Source.S3, source_uri="s3://partner-data/c.csv",
        source_secret=sealed,
    )  # fmt: skip
    page = client_for(operator).get(f"/admin/jobs/job/{job.pk}/change/")
    assert page.status_code == 200
    assert "s3://partner-data/c.csv" in page.content.decode()
    assert sealed not in page.content.decode() and "partner-secret-value" not in page.content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("prefix", "work", "records"),
    [("photos/", "image-thumbs", 3), ("parts/", "clean-table", 1500), ("jsonl/", "clean-table", 500),
     ("pq/", "clean-table", 1000)],
    ids=["images", "csv parts", "jsonl parts", "parquet parts"],
)  # fmt: skip
def test_a_prefix_stages_every_object_under_it_as_one_dataset(s3_fleet, partner_client, prefix, work, records):
    form = job_form(location=f"s3://partner-data/{prefix}", work=work)
    del form["data"]
    form.update({f"s3_{name}": value for name, value in CREDENTIALS.items()})
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    assert job.records_total == records
    assert job.records_out + job.records_rejected == records


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("prefix", "error"),
    [
        ("badparts/", "s3://partner-data/badparts/part-1.csv has another header than the first part."),
        ("mixed/", "s3://partner-data/mixed/ mixes csv and images files; stage one kind at a time."),
        ("nothing-here/", "s3://partner-data/nothing-here/ holds no objects."),
    ],
)
def test_a_prefix_that_is_no_one_dataset_fails_with_the_reason(s3_fleet, partner_client, prefix, error):
    job = staged(partner_client, f"s3://partner-data/{prefix}", CREDENTIALS)
    assert job.state == State.FAILED
    assert job.error == f"Staging failed: {error}"


@pytest.mark.django_db
def test_a_new_organisation_never_takes_a_slug_whose_folder_in_the_operators_bucket_holds_data(
    s3_server, settings, monkeypatch
):
    """portal-lake holds partner-lab/customers.csv: an applicant naming their organisation Partner-Lab
    must not read it."""

    settings.E31_STAGING_S3_ENDPOINT_URL = s3_server
    for name, value in PORTAL_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    application = Application.objects.create(
        name="Eve", email="eve@x.example", organisation="Partner-Lab", dataset="x", work="y"
    )
    membership, _ = onboarding.accept(application, None)
    assert membership.organisation.slug == "partner-lab-2"

    settings.E31_STAGING_S3_ENDPOINT_URL = "http://127.0.0.1:9"  # nothing listens: the check cannot be made
    other = Application.objects.create(name="Mo", email="mo@x.example", organisation="Mo Lab", dataset="x", work="y")
    with pytest.raises(onboarding.AcceptError, match=r"its folders could not be checked: s3://portal-lake/"):
        onboarding.accept(other, None)
    other.refresh_from_db()
    assert other.status == "new"


class Reads:
    """The ranged GETs an S3 client makes (each one's Range and If-Match), with `after(number, answer)` run
    on each answer: a test breaks a body or changes the object there."""

    def __init__(self, monkeypatch, after=lambda number, answer: None):
        self.asked: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        made = s3_reads.client

        def client(credentials):
            s3_client = made(credentials)
            s3_client.meta.events.register("provide-client-params.s3.GetObject", self._asked)
            s3_client.meta.events.register("after-call.s3.GetObject", self._answered)
            return s3_client

        self.after = after
        monkeypatch.setattr(s3_reads, "client", client)

    def _asked(self, params, **kwargs):
        with self.lock:
            self.asked.append((params.get("Range", ""), params.get("IfMatch", "")))
            params["_number"] = len(self.asked)  # told to after-call through the request's context
        kwargs["context"]["number"] = params.pop("_number")

    def _answered(self, parsed, context, **kwargs):
        self.after(context.get("number"), parsed)


class Breaks:
    """A body that hands out its first `left` bytes, then fails as a connection that drops does."""

    def __init__(self, body, left: int):
        self.body, self.left = body, left

    def read(self, amount: int) -> bytes:
        if self.left <= 0:
            raise ResponseStreamingError(error="the connection dropped")
        data = self.body.read(min(amount, self.left))
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.body.close()


@pytest.fixture
def small_parts(monkeypatch, settings, s3_server):
    """Parts of 1 MiB, four connections: BIG (23 MB) in 23 parts; S3 on the loopback server."""
    monkeypatch.setattr(s3_reads, "PART_BYTES", 1024 * 1024)
    monkeypatch.setattr(s3_reads, "CONNECTIONS", 4)
    settings.E31_STAGING_S3_ENDPOINT_URL = s3_server


def test_an_object_streams_in_parallel_ranged_parts_each_asked_with_its_etag(small_parts, monkeypatch):
    reads = Reads(monkeypatch)
    into = io.BytesIO()
    heard = []
    size = s3_reads.stream(
        "s3://partner-data/exports/big.csv", CREDENTIALS, into, max_bytes=LIMIT, on_length=heard.append
    )
    assert (size, heard, into.getvalue() == BIG) == (len(BIG), [len(BIG)], True)
    mib = 1024 * 1024
    assert sorted(reads.asked) == sorted(
        (f"bytes={start}-{min(start + mib, len(BIG)) - 1}", f'"{hashlib.md5(BIG).hexdigest()}"')
        for start in range(0, len(BIG), mib)
    )


@pytest.mark.django_db
def test_staging_from_s3_streams_into_the_copy_with_no_temporary_file(small_parts, monkeypatch, organisation):
    def no_scratch(*args, **kwargs):
        raise AssertionError("an S3 object is not copied into a temporary file first")

    monkeypatch.setattr(tempfile, "TemporaryFile", no_scratch)
    job = make_job(
        organisation, State.STAGING, source_kind=Job.Source.S3, source_uri="s3://partner-data/exports/big.csv",
        source_name="big.csv", source_secret=s3.seal(CREDENTIALS), staging_claim="attempt",
    )  # fmt: skip
    with sources.open_source(job, StagingProgress(job.pk, "attempt")) as source:
        assert isinstance(source, sources._Body), "the object's parts as they arrive"
        assert source.read() == BIG
    progress = StagingProgress(job.pk, "attempt")
    _, size, sha256, _ = copy_to_job_storage(job, f"{job.storage_prefix}/input/big.csv", progress)
    assert (size, sha256) == (len(BIG), hashlib.sha256(BIG).hexdigest())


def test_a_part_whose_connection_drops_is_asked_again_for_its_rest_alone(small_parts, monkeypatch):
    mib = 1024 * 1024

    def break_part_three(number, answer):
        if answer.get("ContentRange", "").startswith(f"bytes {3 * mib}-") and not broken:
            broken.append(number)
            answer["Body"] = Breaks(answer["Body"], 300_000)

    broken = []
    reads = Reads(monkeypatch, after=break_part_three)
    into = io.BytesIO()
    s3_reads.stream("s3://partner-data/exports/big.csv", CREDENTIALS, into, max_bytes=LIMIT)
    assert into.getvalue() == BIG
    ranges = [asked for asked, _ in reads.asked]
    assert f"bytes={3 * mib + 300_000}-{4 * mib - 1}" in ranges, "the rest of the part that dropped"
    assert len(ranges) == len(range(0, len(BIG), mib)) + 1, "nothing else asked again"


def test_an_object_that_changes_between_parts_fails_saying_so(small_parts, monkeypatch, s3_server):
    writer = s3_reads.client(CREDENTIALS)
    writer.put_object(Bucket="partner-data", Key="exports/changing.csv", Body=BIG)
    changed = threading.Event()

    def change_after_the_first_part(number, answer):
        if not changed.is_set():
            writer.put_object(Bucket="partner-data", Key="exports/changing.csv", Body=BIG[::-1])
            changed.set()

    Reads(monkeypatch, after=change_after_the_first_part)
    into = io.BytesIO()
    with pytest.raises(s3.S3Error) as refused:
        s3_reads.stream("s3://partner-data/exports/changing.csv", CREDENTIALS, into, max_bytes=LIMIT)
    assert str(refused.value) == (
        f's3://partner-data/exports/changing.csv changed while it was staged (its ETag is no longer "'
        f'{hashlib.md5(BIG).hexdigest()}"); stage it again once it is complete.'
    )
    assert BIG.startswith(into.getvalue()), "no byte of the new object handed on"


def test_an_object_over_the_limit_is_refused_before_a_byte_is_read(small_parts, monkeypatch):
    reads = Reads(monkeypatch)
    with pytest.raises(s3.S3Error, match=f"big.csv is {len(BIG):,} bytes, more than the 1,000-byte"):
        s3_reads.stream("s3://partner-data/exports/big.csv", CREDENTIALS, io.BytesIO(), max_bytes=1000)
    assert reads.asked == []
