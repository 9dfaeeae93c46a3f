"""Resumable uploads (tus 1.0): chunks with offsets and checksums; every bad chunk is refused and
leaves what is stored as it was; a finished upload becomes a job's data without being sent again."""

import fcntl
import hashlib
import io
import os
import zlib
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from jobs.models import Job, State, Upload
from jobs.uploads import resumable
from tests.jobs.uploads.tus import DATA, TUS, b64, create, created, job_with_upload, send, upload_of, upload_whole
from tests.support import wait_for_end

pytestmark = pytest.mark.django_db


def test_it_says_what_it_supports(partner_client):
    response = partner_client.options("/jobs/uploads/")
    assert response.status_code == 204
    assert response["Tus-Version"] == "1.0.0"
    assert set(response["Tus-Extension"].split(",")) == {"creation", "termination", "expiration", "checksum"}
    assert "sha256" in response["Tus-Checksum-Algorithm"].split(",")
    assert int(response["Tus-Max-Size"]) >= 50 * 1024**3


def test_it_takes_a_file_in_chunks_and_resumes_from_the_confirmed_offset(partner_client):
    url = created(partner_client)
    head = partner_client.head(url, **TUS)
    assert (head.status_code, head["Upload-Offset"], head["Upload-Length"]) == (200, "0", str(len(DATA)))
    assert head["Cache-Control"] == "no-store" and head["Tus-Resumable"] == "1.0.0"
    assert send(partner_client, url, 0, DATA[:100_000]).status_code == 204
    # The page reloads: it asks where the upload stands and goes on from there.
    offset = int(partner_client.head(url, **TUS)["Upload-Offset"])
    assert offset == 100_000
    response = send(partner_client, url, offset, DATA[offset:])
    assert (response.status_code, response["Upload-Offset"]) == (204, str(len(DATA)))
    upload = upload_of(url)
    assert upload.complete and upload.filename == "customers.csv"
    assert upload.path.read_bytes() == DATA


def test_it_refuses_a_chunk_at_the_wrong_offset_and_keeps_what_it_has(partner_client):
    url = created(partner_client)
    send(partner_client, url, 0, DATA[:1000])
    for wrong in (0, 999, 1001, 5000):
        response = send(partner_client, url, wrong, DATA[wrong : wrong + 500])
        assert response.status_code == 409
        assert "The upload is at byte 1000" in response.content.decode()
    assert upload_of(url).offset == 1000
    assert upload_of(url).path.read_bytes() == DATA[:1000]


def test_a_repeated_chunk_is_harmless(partner_client):
    url = created(partner_client)
    first = DATA[:1000]
    assert send(partner_client, url, 0, first).status_code == 204
    assert send(partner_client, url, 0, first).status_code == 409
    assert send(partner_client, url, 1000, DATA[1000:]).status_code == 204
    assert upload_of(url).path.read_bytes() == DATA


@pytest.mark.parametrize(
    "checksum",
    [
        "sha256 " + b64(hashlib.sha256(b"something else").digest()),
        "sha1 " + b64(hashlib.sha1(b"something else").digest()),
        "md5 " + b64(hashlib.md5(b"something else").digest()),
        "crc32 " + b64(zlib.crc32(b"something else").to_bytes(4, "big")),
    ],
)
def test_it_refuses_a_chunk_whose_checksum_fails_and_stores_nothing_of_it(partner_client, checksum):
    url = created(partner_client)
    send(partner_client, url, 0, DATA[:1000])
    response = send(partner_client, url, 1000, DATA[1000:2000], checksum=checksum)
    assert response.status_code == 460
    assert "checksum does not match" in response.content.decode()
    upload = upload_of(url)
    assert upload.offset == 1000 and upload.path.read_bytes() == DATA[:1000]
    assert send(partner_client, url, 1000, DATA[1000:2000]).status_code == 204


@pytest.mark.parametrize("size", [1, 1000, 2 * resumable.FLUSH_EVERY + 3])  # the last written out behind it
def test_it_takes_a_chunk_with_its_crc32_as_the_e31_client_sends_it(partner_client, size):
    data = os.urandom(size)
    url = created(partner_client, length=size)
    checksum = "crc32 " + b64(zlib.crc32(data).to_bytes(4, "big"))
    assert send(partner_client, url, 0, data, checksum=checksum).status_code == 204
    assert upload_of(url).path.read_bytes() == data


def crc32_header(data: bytes) -> str:
    return "crc32 " + b64(zlib.crc32(data).to_bytes(4, "big"))


def test_it_answers_the_crc32_of_the_bytes_it_has_however_each_chunk_came(partner_client):
    url = created(partner_client)
    assert partner_client.head(url, **TUS)["Upload-Offset-Checksum"] == crc32_header(b"")
    # The page's chunks come with their SHA-256, the client's with their CRC-32, another tus client's with none.
    chunks = [(0, 1000, "computed"), (1000, 4096, "crc32"), (5096, 1, None), (5097, 70_000, "computed")]
    for start, length, checksum in chunks:
        chunk = DATA[start : start + length]
        response = send(
            partner_client, url, start, chunk, checksum=crc32_header(chunk) if checksum == "crc32" else checksum
        )
        assert response["Upload-Offset-Checksum"] == crc32_header(DATA[: start + length])
    refused = send(partner_client, url, 75_097, DATA[75_097:76_000], checksum="crc32 AAAAAA==")
    assert refused.status_code == 460
    assert partner_client.head(url, **TUS)["Upload-Offset-Checksum"] == crc32_header(DATA[:75_097])
    resumable.write_chunk(upload_of(url), "75097", io.BytesIO(DATA[75_097:75_600]), "1000", "")  # cut off
    assert partner_client.head(url, **TUS)["Upload-Offset-Checksum"] == crc32_header(DATA[:75_600])


def test_an_upload_begun_before_its_crc32_was_kept_answers_none(partner_client):
    url = created(partner_client)
    send(partner_client, url, 0, DATA[:1000])
    Upload.objects.filter(pk=upload_of(url).pk).update(crc32=None)
    send(partner_client, url, 1000, DATA[1000:2000])
    head = partner_client.head(url, **TUS)
    assert head["Upload-Offset"] == "2000" and "Upload-Offset-Checksum" not in head


@pytest.mark.parametrize(
    ("checksum", "message"),
    [
        ("crc32c AAAAAA==", "not crc32c"),
        ("crc32 " + b64(b"toolong"), "A crc32 checksum has 4 bytes, not 7"),
        ("sha256 not-base64!", "The checksum is not base64"),
        ("sha256 " + b64(b"short"), "A sha256 checksum has 32 bytes, not 5"),
        ("sha256", "A sha256 checksum has 32 bytes, not 0"),
    ],
)
def test_it_refuses_a_checksum_it_cannot_read(partner_client, checksum, message):
    url = created(partner_client)
    response = send(partner_client, url, 0, DATA[:1000], checksum=checksum)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert upload_of(url).offset == 0


@pytest.mark.parametrize(
    ("length", "status", "message"),
    [
        ("abc", 400, "Upload-Length must be a whole number of bytes, not 'abc'"),
        ("-5", 400, "not '-5'"),
        ("1.5", 400, "not '1.5'"),
        ("0", 400, "The file is empty"),
        (str(50 * 1024**3 + 1), 413, "is 53,687,091,201 bytes, more than the 53,687,091,200-byte (50\xa0GiB) limit"),
    ],
)
def test_it_refuses_an_upload_of_a_size_it_cannot_take(partner_client, length, status, message):
    response = create(partner_client, length=length)
    assert response.status_code == status
    assert message in response.content.decode()
    assert not Upload.objects.exists()


def test_it_refuses_an_upload_without_a_length(partner_client):
    response = partner_client.post("/jobs/uploads/", **TUS)
    assert response.status_code == 400
    assert "not None" in response.content.decode()


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"HTTP_TUS_RESUMABLE": "0.2.2"}, 412, "Send Tus-Resumable: 1.0.0"),
        ({"content_type": "text/csv"}, 415, "Send chunks as application/offset+octet-stream"),
        ({"HTTP_UPLOAD_OFFSET": "soon"}, 400, "Upload-Offset must be a whole number of bytes, not 'soon'"),
    ],
)
def test_it_refuses_a_chunk_that_breaks_the_protocol(partner_client, change, status, message):
    url = created(partner_client)
    response = send(partner_client, url, 0, DATA[:100], **change)
    assert response.status_code == status
    assert message in response.content.decode()
    assert upload_of(url).offset == 0


def test_it_refuses_a_chunk_that_runs_past_the_length(partner_client):
    url = created(partner_client, length=100)
    response = send(partner_client, url, 0, DATA[:101])
    assert response.status_code == 400
    assert "ends at byte 101, past the upload's 100 bytes" in response.content.decode()
    assert upload_of(url).path.read_bytes() == b""


def test_it_keeps_what_arrived_of_a_chunk_cut_off_without_a_checksum(partner_client):
    url = created(partner_client)
    upload = upload_of(url)
    assert resumable.write_chunk(upload, "0", io.BytesIO(DATA[:600]), "1000", "") == 600
    assert upload.path.read_bytes() == DATA[:600]


def test_it_keeps_nothing_of_a_chunk_cut_off_before_its_checksum_could_match(partner_client):
    url = created(partner_client)
    upload = upload_of(url)
    checksum = "sha256 " + b64(hashlib.sha256(DATA[:1000]).digest())
    with pytest.raises(resumable.UploadError) as refused:
        resumable.write_chunk(upload, "0", io.BytesIO(DATA[:600]), "1000", checksum)
    assert refused.value.status == 460
    upload.refresh_from_db()
    assert upload.offset == 0 and upload.path.read_bytes() == b""


def test_a_second_writer_is_turned_away_while_a_chunk_is_written(partner_client):
    url = created(partner_client)
    with upload_of(url).path.open("r+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        response = send(partner_client, url, 0, DATA[:100])
    assert response.status_code == 423
    assert send(partner_client, url, 0, DATA[:100]).status_code == 204


def test_an_expired_upload_takes_no_chunk_and_is_purged(partner_client):
    url = created(partner_client)
    send(partner_client, url, 0, DATA[:1000])
    upload = upload_of(url)
    Upload.objects.filter(pk=upload.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = send(partner_client, url, 1000, DATA[1000:2000])
    assert response.status_code == 410
    assert "expired" in response.content.decode()
    assert partner_client.head(url, **TUS).status_code == 410
    fresh = upload_of(created(partner_client))
    assert resumable.purge_abandoned() == 1
    assert not upload.path.exists() and not Upload.objects.filter(pk=upload.pk).exists()
    assert fresh.path.exists(), "an upload still in time is kept"
    assert partner_client.head(url, **TUS).status_code == 404


def test_each_chunk_pushes_the_expiry_back(partner_client):
    url = created(partner_client)
    Upload.objects.filter(pk=upload_of(url).pk).update(expires_at=timezone.now() + timedelta(minutes=1))
    send(partner_client, url, 0, DATA[:100])
    assert upload_of(url).expires_at > timezone.now() + timedelta(hours=23)


def test_it_deletes_an_upload_on_request(partner_client):
    url = created(partner_client)
    path = upload_of(url).path
    assert partner_client.delete(url, **TUS).status_code == 204
    assert not path.exists() and not Upload.objects.exists()


def test_outsiders_see_no_upload_of_another_organisation(partner_client, outsider_client):
    url = created(partner_client)
    send(partner_client, url, 0, DATA[:100])
    assert outsider_client.head(url, **TUS).status_code == 404
    assert send(outsider_client, url, 100, DATA[100:200]).status_code == 404
    assert outsider_client.delete(url, **TUS).status_code == 404
    assert upload_of(url).offset == 100


def test_it_needs_a_logged_in_member(operator):
    anonymous = Client()
    assert create(anonymous).status_code == 403
    staff = Client()
    staff.force_login(operator)
    assert create(staff).status_code == 403
    assert not Upload.objects.exists()


def test_it_needs_the_csrf_token(partner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(partner)
    assert create(client).status_code == 403
    client.get("/jobs/new/")
    token = client.cookies["csrftoken"].value
    url = created(client, HTTP_X_CSRFTOKEN=token)
    assert send(client, url, 0, DATA[:100]).status_code == 403
    assert send(client, url, 0, DATA[:100], HTTP_X_CSRFTOKEN=token).status_code == 204


def test_the_form_refuses_an_unfinished_upload_and_keeps_it(partner_client, online_slots):
    url = created(partner_client)
    send(partner_client, url, 0, DATA[:1000])
    response = partner_client.post("/jobs/new/", job_with_upload(url))
    assert response.status_code == 400
    assert f"The upload of customers.csv is at 1,000 of {len(DATA):,} bytes" in response.content.decode()
    assert not Job.objects.exists() and upload_of(url).offset == 1000


def test_a_form_with_a_bad_request_keeps_the_finished_upload_for_the_next_try(partner_client, online_slots):
    url = upload_whole(partner_client)
    response = partner_client.post("/jobs/new/", job_with_upload(url, gpus="0"))
    assert response.status_code == 400
    page = response.content.decode()
    assert "customers.csv is uploaded" in page
    assert f'value="{upload_of(url).pk}"' in page
    assert partner_client.post("/jobs/new/", job_with_upload(url)).status_code == 302
    assert not Upload.objects.exists()


def test_another_organisation_cannot_submit_a_job_with_the_upload(partner_client, outsider_client, online_slots):
    url = upload_whole(partner_client)
    response = outsider_client.post("/jobs/new/", job_with_upload(url))
    assert response.status_code == 400
    assert "That upload is gone" in response.content.decode()
    assert not Job.objects.exists() and upload_of(url).complete


def test_a_finished_upload_is_used_once(partner_client, online_slots):
    url = upload_whole(partner_client)
    form = job_with_upload(url)
    assert partner_client.post("/jobs/new/", form).status_code == 302
    response = partner_client.post("/jobs/new/", form)
    assert response.status_code == 400
    assert "That upload is gone" in response.content.decode()
    assert Job.objects.count() == 1


def test_the_form_refuses_an_upload_that_is_no_dataset(partner_client, online_slots):
    png = b"\x89PNG\r\n\x1a\n" + bytes(200)
    url = upload_whole(partner_client, data=png, chunk=100)
    response = partner_client.post("/jobs/new/", job_with_upload(url))
    assert response.status_code == 400
    assert not Job.objects.exists() and upload_of(url).complete


@pytest.mark.django_db(transaction=True)
def test_a_job_runs_on_a_resumable_upload_end_to_end(fleet, partner_client):
    url = upload_whole(partner_client, chunk=64 * 1024)
    local = upload_of(url).path
    response = partner_client.post("/jobs/new/", job_with_upload(url))
    assert response.status_code == 302
    assert not local.exists(), "the upload's file moved to storage"
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    assert job.source_kind == Job.Source.UPLOAD and job.source_name == "customers.csv"
    assert job.input_sha256 == hashlib.sha256(DATA).hexdigest()
    assert job.input_bytes == len(DATA)


@pytest.mark.parametrize(
    ("metadata", "name"),
    [("", "data"), (f"filename {b64(b'..')}", "data"), (f"filename {b64(b'../../etc/x y.csv')}", "x_y.csv")],
)
def test_it_names_an_upload_safely(partner_client, metadata, name):
    response = partner_client.post("/jobs/uploads/", **TUS, HTTP_UPLOAD_LENGTH="10", HTTP_UPLOAD_METADATA=metadata)
    assert response.status_code == 201
    assert upload_of(response["Location"]).filename == name
