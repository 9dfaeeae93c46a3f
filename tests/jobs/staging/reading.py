"""Data read as staging reads it, for staging's tests: detected and read record by record, described
and cut into shards, or fetched from a server on loopback."""

import io

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from jobs.models import Job, State
from jobs.processors import Record
from jobs.staging import fastcsv
from jobs.staging import fetch as fetcher
from jobs.staging.describe import describe_and_cut
from jobs.staging.fetch import fetch
from jobs.staging.formats import detect, iter_records, read_header
from jobs.staging.progress import StagingProgress
from tests.factories import make_job

COMMAS = {"format": "csv", "delimiter": ",", "quotechar": '"'}
LOCAL = ("127.0.0.1",)


def read(data: bytes, layout: dict | None = None) -> tuple[dict, list[Record]]:
    """Detect (unless given the layout), read the header for CSV and read every record, as staging does."""
    layout = dict(layout or detect(data, at_eof=True))
    stream = io.BytesIO(data)
    offset, header_lines = 0, 0
    if layout["format"] == "csv":
        layout["columns"], offset, header_lines = read_header(stream, layout)
        stream.seek(offset)
    return layout, list(iter_records(stream, layout, start=offset, first_line=header_lines + 1))


def shard_records(data: bytes, layout: dict, shard: dict) -> list[Record]:
    """A shard's records, read back from its byte range alone, as a slot reads them."""
    return list(
        iter_records(
            io.BytesIO(data[shard["start_byte"] : shard["end_byte"]]),
            layout,
            start=shard["start_byte"],
            end=shard["end_byte"],
            first_position=shard["first_record"],
            first_line=shard["first_line"],
        )
    )


def job_for(organisation) -> Job:
    """A job staging data.csv for 2 GPUs, for `described`."""
    return make_job(organisation, State.STAGING, source_name="data.csv", gpus=2)


def described(job: Job, data: bytes, exact: bool = False):
    path = default_storage.save("test-fastcsv/data.csv", ContentFile(data))
    try:
        with pytest.MonkeyPatch.context() as patch:
            if exact:
                patch.setattr(fastcsv, "read", _unsure)
            return describe_and_cut(job, path, StagingProgress(job.pk, job.staging_claim))
    finally:
        default_storage.delete(path)


def _unsure(*args, **kwargs):
    raise fastcsv.Unsure


def get(url: str, **options) -> tuple[fetcher.Fetched, bytes]:
    dest = io.BytesIO()
    result = fetch(url, dest, **{"max_bytes": 10_000_000, "timeout": 5.0, **options})
    return result, dest.getvalue()
