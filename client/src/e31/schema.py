"""The shapes of what the API answers (docs/api.md), for type checkers and readers. They describe
JSON as it comes: nothing checks them at run time, and a field the portal adds later is still there."""

from typing import Any, TypedDict

ENDED = frozenset({"succeeded", "failed", "cancelled", "timed_out"})


class Progress(TypedDict, total=False):
    records_done: int
    records_total: int | None  # None while staging streams into the pass
    percent: int
    records_per_second: float | None
    eta_seconds: float | None
    staging_percent: int
    streaming: bool  # staging goes on while the pass runs on what is staged
    staged_bytes: int | None


class Meter(TypedDict, total=False):
    gpu_hours: str
    amount: str
    currency: str
    rate: str


class OutputFile(TypedDict):
    name: str
    url: str


class Output(TypedDict, total=False):
    files: list[OutputFile]
    manifest: str


class Job(TypedDict, total=False):
    id: int
    url: str
    page: str
    kind: str
    work: str
    params: dict[str, str]
    state: str
    state_display: str
    on_hold: bool
    on_hold_reason: str
    error: str
    data: dict[str, Any]
    request: dict[str, Any]
    retention: dict[str, Any]
    created: str
    queued_at: str | None
    started_at: str | None
    ended_at: str | None
    progress: Progress
    queue: dict[str, Any]
    meter: Meter
    output: Output
    sample: dict[str, Any]
    # "unreachable" on a job created or cancelled while the portal's task queue was: the change is
    # recorded, and acted on once the queue is back.
    task_queue: str


class Page(TypedDict):
    count: int
    next: str | None
    previous: str | None
    results: list[Any]


class Event(TypedDict):
    at: str
    state: str
    message: str


class UploadOffset(TypedDict):
    offset: int
    length: int
    checksum: str | None  # the CRC-32 of the bytes up to `offset`, as upload.checksum writes it; None if not given
