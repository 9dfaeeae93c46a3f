"""A client of the resumable upload's tus endpoints, for the tests: create an upload, send its chunks,
and name the finished upload in the job form."""

import base64
import hashlib

from jobs.models import Upload
from jobs.uploads import resumable
from tests.support import EXAMPLE, job_form

TUS = {"HTTP_TUS_RESUMABLE": "1.0.0"}
DATA = EXAMPLE.read_bytes()
DATA_LENGTH = len(DATA)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def create(client, length=DATA_LENGTH, name="customers.csv", **extra):
    headers = {**TUS, "HTTP_UPLOAD_LENGTH": str(length), "HTTP_UPLOAD_METADATA": f"filename {b64(name.encode())}"}
    return client.post("/jobs/uploads/", **{**headers, **extra})


def created(client, **kwargs) -> str:
    response = create(client, **kwargs)
    assert response.status_code == 201, response.content
    return response["Location"]


def send(client, url, offset, chunk: bytes, checksum: str | None = "computed", **extra):
    headers = {**TUS, "HTTP_UPLOAD_OFFSET": str(offset)}
    if checksum == "computed":
        headers["HTTP_UPLOAD_CHECKSUM"] = "sha256 " + b64(hashlib.sha256(chunk).digest())
    elif checksum:
        headers["HTTP_UPLOAD_CHECKSUM"] = checksum
    return client.generic(
        "PATCH", url, chunk, content_type=extra.pop("content_type", resumable.CHUNK_TYPE), **{**headers, **extra}
    )


def upload_of(url) -> Upload:
    return Upload.objects.get(pk=url.rstrip("/").rsplit("/", 1)[-1])


def upload_whole(client, data=DATA, chunk=4096) -> str:
    url = created(client, length=len(data))
    for offset in range(0, len(data), chunk):
        response = send(client, url, offset, data[offset : offset + chunk])
        assert response.status_code == 204, response.content
        assert int(response["Upload-Offset"]) == min(offset + chunk, len(data))
    return url


def job_with_upload(url, **fields):
    form = job_form(**fields)
    del form["data"]
    form["upload"] = str(upload_of(url).pk)
    return form
