"""A job as it is asked for, in its four parts: the work, the data, the request and the retention.

The job form, `manage.py submit` and the API build a `JobSpec`; `services.submit_job` checks it and
makes the job. A spec carries what was given, as given: the checks, and their sentences, are the
service's.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import BinaryIO
from uuid import UUID

from jobs.models import Job


@dataclass(frozen=True)
class NamedFile:
    """A file sent with the job: its bytes, and the name it was sent under."""

    stream: BinaryIO
    name: str


@dataclass(frozen=True)
class Work:
    """The processing step: a work kind, its parameters as typed, and the model it runs, if any, given one
    way: a file sent with the job, a location (an http(s) URL, an s3:// URI or a server path), or an
    earlier job of the organisation's whose model is still kept. An s3:// model is read with
    `model_s3_credentials` when given (a bucket of another account than the data's), else with the data's."""

    kind: str
    params: Mapping[str, str] = field(default_factory=dict)
    model: NamedFile | None = None
    model_location: str = ""
    model_from_job: int | None = None
    model_s3_credentials: dict[str, str] | None = None


@dataclass(frozen=True)
class Data:
    """The dataset, given one way: a file sent with the job, a finished resumable upload, a location (an
    http(s) URL, an s3:// URI with the credentials to read it, or a server path), or several locations of
    one kind (`locations`), one dataset of their parts joined in the order given. `sha256`, if given, is
    what staging checks the data against: for parts, that of all their bytes as sent, in order."""

    file: NamedFile | None = None
    upload: UUID | None = None
    location: str = ""
    locations: tuple[str, ...] = ()
    s3_credentials: dict[str, str] | None = None
    sha256: str = ""


@dataclass(frozen=True)
class Request:
    """GPUs × hours in a shape, an optional deadline, and whether a partial output will do; fixed (all its
    GPUs at once) or flexible (a budget of GPUs × hours on as many slots as are free, up to `max_gpus`),
    blank for the default (flexible without a deadline, fixed with one). GPUs, hours, the shape, the kind,
    the width cap and the deadline (ISO 8601 as text; blank for none) are as typed: the service reads them."""

    gpus: int | str
    hours: Decimal | int | str
    shape: str = Job.Shape.SHORT_WIDE
    deadline: datetime | str | None = None
    allow_partial: bool = False
    kind: str = ""
    max_gpus: int | str | None = None


@dataclass(frozen=True)
class Retention:
    """The days the staged copy is kept after the job (0: deleted when it ends), and the output's
    (None: the retention policy's default), as numbers or as typed: the service reads them."""

    staged_days: int | str = 0
    output_days: int | str | None = None


@dataclass(frozen=True)
class JobSpec:
    """A job's four parts. With `sample`, the job is a sample of the pass `request` asks for."""

    work: Work
    data: Data
    request: Request
    retention: Retention = Retention()
    sample: bool = False
