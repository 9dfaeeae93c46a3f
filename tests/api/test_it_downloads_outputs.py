"""GET /api/v1/jobs/<id>/output/<name>: the file streamed with HTTP Range for a resumable download (206 with
Content-Range; 416 past the end; several ranges, or an If-Range naming another version, get the whole file),
a redirect to a signed URL on S3, 410 once the output is purged; and the manifest as JSON."""

import json
import os

import pytest
from django.test import override_settings
from django.utils import timezone

from jobs.models import Job
from tests.api.support import OUTPUT, finished
from tests.factories import make_job
from tests.support import s3_on_loopback

pytestmark = pytest.mark.django_db
DATA = OUTPUT["output.parquet"]
SIZE = len(DATA)


def get(client, job, headers=None, name="output.parquet"):
    return client.get(f"/api/v1/jobs/{job.pk}/output/{name}", headers=headers or {})


def test_it_sends_the_whole_file_and_says_it_takes_ranges(finished_job, partner_api):
    answer = get(partner_api, finished_job)
    assert answer.status_code == 200
    assert answer.getvalue() == DATA
    assert answer["Content-Length"] == str(SIZE) and answer["Accept-Ranges"] == "bytes"
    assert answer["Content-Disposition"] == f'attachment; filename="job-{finished_job.pk}-output.parquet"'
    assert answer["ETag"].startswith('"')


def test_a_head_request_gives_the_size_without_the_bytes(finished_job, partner_api):
    answer = partner_api.head(f"/api/v1/jobs/{finished_job.pk}/output/output.parquet")
    assert answer.status_code == 200
    assert answer["Content-Length"] == str(SIZE) and answer["Accept-Ranges"] == "bytes"


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        ("bytes=0-99", 0, 99),  # the first bytes
        ("bytes=5000-5999", 5000, 5999),  # the middle
        ("bytes=10000-", 10000, SIZE - 1),  # from an offset on: a download resumed
        ("bytes=-240", SIZE - 240, SIZE - 1),  # the last bytes
        ("bytes=10200-99999", 10200, SIZE - 1),  # past the end: cut to it
        ("bytes=-99999", 0, SIZE - 1),  # a suffix longer than the file: all of it
        ("bytes=7-7", 7, 7),
    ],
)
def test_it_sends_the_range_asked_for(finished_job, partner_api, header, first, last):
    answer = get(partner_api, finished_job, {"Range": header})
    assert answer.status_code == 206
    assert answer.getvalue() == DATA[first : last + 1]
    assert answer["Content-Range"] == f"bytes {first}-{last}/{SIZE}"
    assert answer["Content-Length"] == str(last - first + 1)


@pytest.mark.parametrize("header", ["bytes=10240-", "bytes=99999-100000", "bytes=-0"])
def test_a_range_outside_the_file_is_416(finished_job, partner_api, header):
    answer = get(partner_api, finished_job, {"Range": header})
    assert answer.status_code == 416
    assert answer["Content-Range"] == f"bytes */{SIZE}"
    assert answer.json()["error"]["code"] == "range_not_satisfiable"


@pytest.mark.parametrize(
    "header",
    ["bytes=0-9,20-29", "bytes=0-9, -5", "items=0-9", "bytes=abc", "bytes=9-0", "bytes=-", "bytes 0-9"],
)
def test_several_ranges_or_a_malformed_one_get_the_whole_file(finished_job, partner_api, header):
    answer = get(partner_api, finished_job, {"Range": header})
    assert answer.status_code == 200
    assert answer.getvalue() == DATA
    assert "Content-Range" not in answer


def test_a_resumed_download_of_another_version_gets_the_whole_file(finished_job, partner_api):
    etag = get(partner_api, finished_job)["ETag"]
    same = get(partner_api, finished_job, {"Range": "bytes=100-", "If-Range": etag})
    assert same.status_code == 206 and same.getvalue() == DATA[100:]
    other = get(partner_api, finished_job, {"Range": "bytes=100-", "If-Range": '"another-version"'})
    assert other.status_code == 200 and other.getvalue() == DATA


def test_a_download_tool_asking_for_octet_streams_is_answered(finished_job, partner_api):
    answer = get(partner_api, finished_job, {"Accept": "application/octet-stream"})
    assert answer.status_code == 200
    missing = get(partner_api, finished_job, {"Accept": "application/octet-stream"}, name="nope.bin")
    assert missing.status_code == 404 and missing.json()["error"]["message"] == (
        f"Job {finished_job.pk} has no output file 'nope.bin'."
    )


def test_it_serves_the_manifest_as_json(finished_job, partner_api):
    answer = partner_api.get(f"/api/v1/jobs/{finished_job.pk}/manifest/")
    assert answer.status_code == 200
    assert answer.json() == json.loads(OUTPUT["manifest.json"])
    job = partner_api.get(f"/api/v1/jobs/{finished_job.pk}/").json()
    assert job["output"]["manifest"] == f"/api/v1/jobs/{finished_job.pk}/manifest/"
    assert [file["name"] for file in job["output"]["files"]] == list(OUTPUT)


def test_a_job_without_output_has_no_manifest(organisation, partner_api):
    job = make_job(organisation)
    answer = partner_api.get(f"/api/v1/jobs/{job.pk}/manifest/")
    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == f"Job {job.pk} has no output yet."
    assert get(partner_api, job).status_code == 404


def test_a_purged_output_is_410(finished_job, partner_api):
    Job.objects.filter(pk=finished_job.pk).update(output_purged_at=timezone.now())
    for path in ("output/output.parquet", "manifest/"):
        answer = partner_api.get(f"/api/v1/jobs/{finished_job.pk}/{path}")
        assert answer.status_code == 410
        error = answer.json()["error"]
        assert error["code"] == "gone"
        assert error["message"].startswith(f"The output of job {finished_job.pk} has been deleted: it was kept 30 days")
    assert partner_api.get(f"/api/v1/jobs/{finished_job.pk}/").json()["output"] == {"files": [], "manifest": None}


def test_on_s3_it_redirects_to_a_signed_url(organisation, partner_api):
    credentials = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for name, value in credentials.items():
        os.environ.setdefault(name, value)
    with s3_on_loopback() as (endpoint, client):
        client.create_bucket(Bucket="e31-api-outputs")
        storages = {
            "default": {
                "BACKEND": "storages.backends.s3.S3Storage",
                "OPTIONS": {"bucket_name": "e31-api-outputs", "endpoint_url": endpoint, "file_overwrite": False},
            },
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        }
        with override_settings(STORAGES=storages):
            job = finished(organisation)
            answer = get(partner_api, job, {"Range": "bytes=0-9"})
    assert answer.status_code == 302
    assert answer["Location"].startswith(f"{endpoint}/e31-api-outputs/{job.output_path}/output.parquet?")
    assert "Signature=" in answer["Location"] or "X-Amz-Signature=" in answer["Location"]
