"""`e31.Client`: one method for each route of the portal's API (docs/api.md), over one HTTP connection
pool. Every answer of 400 or more raises APIError with the portal's code and sentence; a 429 is
waited out (its Retry-After) and asked again, a bounded number of times. Every create is sent under an
Idempotency-Key: a connection lost before its answer is asked again with the key, and makes nothing twice."""

import importlib.metadata
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx

from e31.config import normalise_url
from e31.download import download_file
from e31.errors import APIError, error_of
from e31.schema import ENDED, Event, Job, Page, UploadOffset
from e31.upload import FileSpan, backoff, metadata, upload_file, wait_to_retry

log = logging.getLogger("e31")

try:
    VERSION = importlib.metadata.version("e31")
except importlib.metadata.PackageNotFoundError:  # a source tree that was not installed
    VERSION = "0+unknown"
TUS_VERSION = "1.0.0"
CHUNK_TYPE = "application/offset+octet-stream"


def new_key() -> str:
    """An Idempotency-Key for one create."""
    return str(uuid.uuid4())


def retry_after(value: str | None, default: float = 1.0) -> float:
    """The seconds a 429's Retry-After asks for (a number; an HTTP date is read as the default)."""
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


def json_of(response: httpx.Response) -> Any:
    """The JSON of a successful answer; an answer that is not JSON is not the portal's API speaking."""
    try:
        return response.json()
    except ValueError:
        raise APIError(
            response.status_code,
            "invalid",
            f"{response.url.copy_with(query=None)} did not answer JSON: is {response.url.host} the portal?",
        ) from None


def job_spec(
    *,
    work: str,
    gpus: int | str,
    hours: str,
    upload: str | None = None,
    location: str | list[str] = "",
    s3_credentials: dict[str, str] | None = None,
    sha256: str = "",
    params: dict[str, str] | None = None,
    model_upload: str | None = None,
    model_location: str = "",
    model_from_job: int | None = None,
    model_s3_credentials: dict[str, str] | None = None,
    shape: str = "short-wide",
    deadline: str | None = None,
    allow_partial: bool = False,
    kind: str = "",
    max_gpus: int | str | None = None,
    staged_days: int | str = 0,
    output_days: int | str | None = None,
    sample: bool = False,
    webhook_url: str = "",
) -> dict[str, Any]:
    """The body of POST /api/v1/jobs/: data from a finished upload's id or from a location (a list of them: the
    parts of one dataset, in order); a model, where the work takes one, from a finished upload, a location (an
    s3:// one read with its own credentials when given, else the data's), or an earlier job."""
    model = {"model_upload": model_upload, "model_location": model_location, "model_from_job": model_from_job}
    if model_s3_credentials:
        model["model_s3_credentials"] = model_s3_credentials
    return {
        "work": {"kind": work, "params": params or {}, **model},
        "data": {"upload": upload, "location": location, "s3_credentials": s3_credentials, "sha256": sha256},
        "request": request_spec(gpus, hours, shape, deadline, allow_partial, kind=kind, max_gpus=max_gpus),
        "retention": {"staged_days": staged_days, "output_days": output_days},
        "sample": sample,
        "webhook_url": webhook_url,
    }


def request_spec(
    gpus: int | str,
    hours: str,
    shape: str = "short-wide",
    deadline: str | None = None,
    allow_partial: bool = False,
    kind: str = "",
    max_gpus: int | str | None = None,
) -> dict[str, Any]:
    """The request part of a job's body; numbers may be given as typed, for the portal to read and refuse.
    `kind`: fixed or flexible (blank: the portal's default, flexible without a deadline); `max_gpus`: a
    flexible job's width cap."""
    request = {"gpus": gpus, "hours": str(hours), "shape": shape, "deadline": deadline, "allow_partial": allow_partial}
    return {**request, "kind": kind, "max_gpus": max_gpus}


# httpx's sync transport sends a bytes body by slicing off what each send() took, which copies the rest
# every time: a 200 MB body crawls at 60 MB/s on loopback. Handed over a piece at a time (the length
# given, so it is not chunked), it goes at the socket's speed.
PIECE = 1024 * 1024


def pieces(body: bytes) -> Iterator[memoryview]:
    view = memoryview(body)
    for start in range(0, len(body), PIECE):
        yield view[start : start + PIECE]


class Client:
    """The portal at `url`, acting as the user whose API token `token` is."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 60.0,
        max_throttled: int = 5,
        max_throttle_wait: float = 120.0,
        retries: int = 4,
        transport: httpx.BaseTransport | None = None,
    ):
        self.url = normalise_url(url)
        self.max_throttled = max_throttled
        self.max_throttle_wait = max_throttle_wait
        self.retries = retries
        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {token}", "User-Agent": f"e31/{VERSION}"},
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
        )
        # Signed URLs the portal redirects output downloads to are asked without the token.
        self._bare = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0), transport=transport)

    def close(self) -> None:
        self._http.close()
        self._bare.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # The plumbing: every request goes through send().

    def api_url(self, path: str) -> str:
        """A route of the API, `jobs/42/` for instance, as an absolute URL."""
        return f"{self.url}/api/v1/{path}"

    def absolute(self, url: str) -> str:
        """A URL the portal gave (`/api/v1/jobs/42/output/x`, a tus Location) made absolute."""
        return urljoin(self.url + "/", url)

    def send(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
        content: bytes | FileSpan | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        """One request to the portal (an absolute URL); APIError for an answer of 400 or more, after
        waiting out a 429's Retry-After up to max_throttled times and max_throttle_wait seconds."""
        params = {key: value for key, value in (params or {}).items() if value is not None}
        waited, throttled = 0.0, 0
        while True:
            body, sized = content, headers
            if isinstance(content, FileSpan) or (isinstance(content, bytes) and len(content) > PIECE):
                body = content if isinstance(content, FileSpan) else pieces(content)
                sized = {**(headers or {}), "Content-Length": str(len(content))}
            request = self._http.build_request(method, url, params=params, json=json, headers=sized, content=body)
            response = self._http.send(request, stream=stream)
            if response.status_code < 400:
                return response
            response.read()
            response.close()
            if response.status_code == 429 and throttled < self.max_throttled:
                pause = retry_after(response.headers.get("Retry-After"))
                if waited + pause <= self.max_throttle_wait:
                    log.warning("The portal asks to slow down; asking again in %g s.", pause)
                    time.sleep(pause)
                    waited += pause
                    throttled += 1
                    continue
            raise error_of(response)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return json_of(self.send(method, self.api_url(path), **kwargs))

    def _create(self, path: str, key: str | None, **kwargs: Any) -> httpx.Response:
        """A POST that makes something, under the Idempotency-Key `key` (a new one unless given): a connection
        lost before the answer is asked again with the same key, up to `retries` times in a row, and the portal
        answers as it did the first time."""
        headers = {**kwargs.pop("headers", {}), "Idempotency-Key": key or new_key()}
        failures = 0
        while True:
            try:
                return self.send("POST", self.api_url(path), headers=headers, **kwargs)
            except httpx.TransportError as error:
                failures += 1
                wait_to_retry(error, failures, self.retries, f"Making {path}")

    def pages(self, path: str, params: dict[str, Any] | None = None, page_size: int = 100) -> Iterator[Any]:
        """Every result of a paginated route, page after page, newest first."""
        page: Page = self._json("GET", path, params={**(params or {}), "page_size": page_size})
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = json_of(self.send("GET", self.absolute(page["next"])))

    # Who the token is.

    def me(self) -> dict[str, Any]:
        return self._json("GET", "me/")

    def work_kinds(self) -> list[dict[str, Any]]:
        """The work kinds a job may name, each with its parameters (docs/api.md, "Work kinds")."""
        return self._json("GET", "work-kinds/")

    # Uploads (tus 1.0): the protocol's steps; upload() runs them with resume.

    def create_upload(self, length: int, filename: str, key: str | None = None) -> str:
        """A new upload of `length` bytes; its absolute URL (the Location, whose last part is its id)."""
        response = self._create(
            "uploads/",
            key,
            headers={"Tus-Resumable": TUS_VERSION, "Upload-Length": str(length), "Upload-Metadata": metadata(filename)},
        )
        location = response.headers.get("Location")
        if not location:
            raise APIError(response.status_code, "invalid", "The portal created an upload but gave no Location.")
        return urljoin(str(response.url), location)

    def upload_offset(self, upload_url: str) -> UploadOffset:
        """The bytes the portal has confirmed for an upload, its length, and the CRC-32 of those bytes (tus HEAD,
        with the portal's Upload-Offset-Checksum)."""
        response = self.send("HEAD", upload_url, headers={"Tus-Resumable": TUS_VERSION})
        return {
            "offset": int(response.headers["Upload-Offset"]),
            "length": int(response.headers.get("Upload-Length", -1)),
            "checksum": response.headers.get("Upload-Offset-Checksum"),
        }

    def upload_chunk(self, upload_url: str, offset: int, chunk: bytes | FileSpan, checksum: str) -> int:
        """Send `chunk` at `offset` with its checksum (upload.checksum's); the offset the portal confirms."""
        response = self.send(
            "PATCH",
            upload_url,
            content=chunk,
            headers={
                "Tus-Resumable": TUS_VERSION,
                "Content-Type": CHUNK_TYPE,
                "Upload-Offset": str(offset),
                "Upload-Checksum": checksum,
            },
        )
        return int(response.headers["Upload-Offset"])

    def delete_upload(self, upload_url: str) -> None:
        self.send("DELETE", upload_url, headers={"Tus-Resumable": TUS_VERSION})

    def upload(self, path: str | Path, **options: Any) -> str:
        """Upload a file, resuming an earlier upload of it; the finished upload's id. The options are
        e31.upload.upload_file's (chunk_size, store, progress, retries)."""
        return upload_file(self, Path(path), **options).upload_id

    # Jobs.

    def create_job(self, spec: dict[str, Any], key: str | None = None) -> Job:
        """A new job (the body is job_spec()'s); 201 with the job. The same `key` again answers with this job."""
        return json_of(self._create("jobs/", key, json=spec))

    def check_job(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The portal's dry run of create_job: every check it makes, nothing made. The job as it would be made
        (`"dry_run": true`, its request and the most it can cost), or APIError with every value refused."""
        return self._json("POST", "jobs/", params={"dry_run": "1"}, json=spec)

    def list_jobs(self, page: int = 1, page_size: int = 20, **filters: Any) -> Page:
        """One page of the organisation's jobs, newest first; filters: state, kind, work,
        created_after, created_before."""
        return self._json("GET", "jobs/", params={**filters, "page": page, "page_size": page_size})

    def jobs(self, **filters: Any) -> Iterator[Job]:
        """Every job the filters match, newest first, fetched a page at a time."""
        return self.pages("jobs/", filters)

    def job(self, job_id: int) -> Job:
        return self._json("GET", f"jobs/{job_id}/")

    def events(self, job_id: int) -> list[Event]:
        return self._json("GET", f"jobs/{job_id}/events/")

    def manifest(self, job_id: int) -> dict[str, Any]:
        return self._json("GET", f"jobs/{job_id}/manifest/")

    def cancel(self, job_id: int) -> Job:
        return self._json("POST", f"jobs/{job_id}/cancel/")

    def estimate(self, job_id: int, gpus: int | None = None) -> dict[str, Any]:
        return self._json("GET", f"jobs/{job_id}/estimate/", params={"gpus": gpus})

    def start_pass(
        self, sample_id: int, request: dict[str, Any], retention: dict[str, Any] | None = None, key: str | None = None
    ) -> Job:
        """The full pass of a finished sample (request_spec() for `request`); the new job."""
        body = {"request": request, "retention": retention or {"staged_days": 0, "output_days": None}}
        return json_of(self._create(f"jobs/{sample_id}/pass/", key, json=body))

    def receipt(self, job_id: int) -> dict[str, Any]:
        return self._json("GET", f"jobs/{job_id}/receipt/")

    def job_webhooks(self, job_id: int) -> Any:
        return self._json("GET", f"jobs/{job_id}/webhooks/")

    def wait(
        self, job_id: int, on_update: Callable[[Job], None] | None = None, interval: float = 1.0, retries: int = 8
    ) -> Job:
        """Poll the job until it has ended; `on_update` hears it each time round. The job as it ended.
        A portal that cannot be reached is asked again with backoff, `retries` times in a row at most."""
        failures = 0
        while True:
            try:
                job = self.job(job_id)
            except httpx.TransportError as error:
                failures += 1
                if failures > retries:
                    raise
                log.warning("The portal did not answer (%s); asking again.", error or type(error).__name__)
                time.sleep(backoff(failures))
                continue
            failures = 0
            if on_update:
                on_update(job)
            if job["state"] in ENDED:
                return job
            time.sleep(interval)

    def download(self, job_id: int, name: str, folder: str | Path, **options: Any) -> Path:
        """One output file into `folder`, resuming a partial download; its path. The options are
        e31.download.download_file's (expected, progress, retries)."""
        url = self.api_url(f"jobs/{job_id}/output/{name}")
        return download_file(self, url, Path(folder) / name, **options)

    def open_output(self, url: str, offset: int = 0) -> httpx.Response:
        """A streamed answer for an output file from `offset` on: from the portal, or from the signed
        URL it redirects to (asked without the token, which is the portal's alone)."""
        headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={offset}-"} if offset else {})}
        response = self.send("GET", url, headers=headers, stream=True)
        if response.is_redirect:
            location = urljoin(url, response.headers["Location"])
            response.close()
            response = self._bare.send(httpx.Request("GET", location, headers=headers), stream=True)
            if response.status_code >= 400:
                response.read()
                response.close()
                raise error_of(response)
        return response

    # The ledger.

    def ledger(self, month: str | None = None, job: int | None = None) -> Iterator[dict[str, Any]]:
        """The organisation's ledger entries, newest first (month as 2026-12)."""
        return self.pages("ledger/", {"month": month, "job": job})

    def ledger_export(self, fmt: str = "csv", month: str | None = None, job: int | None = None) -> Iterator[bytes]:
        """The whole (filtered) ledger as CSV or JSON, streamed in blocks."""
        response = self.send("GET", self.api_url(f"ledger.{fmt}"), params={"month": month, "job": job}, stream=True)
        try:
            yield from response.iter_bytes()
        finally:
            response.close()

    # Webhooks.

    def webhooks(self) -> Any:
        return self._json("GET", "webhooks/")

    def create_webhook(self, url: str, key: str | None = None) -> dict[str, Any]:
        """A new endpoint of the organisation; its secret is in this answer (and its replays under `key`) only."""
        return json_of(self._create("webhooks/", key, json={"url": url}))

    def delete_webhook(self, webhook_id: int | str) -> None:
        self.send("DELETE", self.api_url(f"webhooks/{webhook_id}/"))
