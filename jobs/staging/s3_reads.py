"""Reading S3 locations (`jobs.staging.s3`) with boto3: an object streamed in parallel ranged GETs, a prefix
gathered into one dataset, a model's files; and whether the operator's buckets hold an organisation's folder.

An object is read as parts of PART_BYTES over CONNECTIONS connections at once and handed on in order as it
arrives (`jobs.staging.reassembly`, as a URL's parts are), into staging's copy with no temporary file between:
each part asked for with If-Match on the object's ETag, so a part of a changed object is never spliced in,
and a part whose connection drops asked for again from where it dropped.
"""

import io
import tarfile
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import BinaryIO

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from jobs.staging import archives, over_limit, reassembly
from jobs.staging.progress import StagingProgress
from jobs.staging.ranged import RangedS3File
from jobs.staging.s3 import Location, S3Error, parse

DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "403"}
MISSING = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}
CHANGED = {"PreconditionFailed", "412"}
CONNECTIONS = 8  # ranged GETs of one object at once
PART_BYTES = 8 * 1024 * 1024
CHUNK = 1024 * 1024  # what a part is read in, and handed on in
RETRIES = 5  # asks again for a part whose connection dropped, before the read fails


def prefix_in_use(prefix: str) -> bool:
    """Whether one of the operator's buckets holds anything under `prefix/` (an organisation's folder
    there); S3Error when a bucket cannot be asked."""
    s3 = client(None)
    for bucket in settings.E31_STAGING_S3_BUCKETS:
        try:
            if s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/", MaxKeys=1).get("KeyCount"):
                return True
        except (BotoCoreError, ClientError) as error:
            raise S3Error(f"s3://{bucket}/ could not be asked whether {prefix}/ holds anything ({error}).") from None
    return False


def client(credentials: dict | None):
    options = {
        "endpoint_url": settings.E31_STAGING_S3_ENDPOINT_URL or None,
        "region_name": (credentials or {}).get("region") or settings.E31_STAGING_S3_REGION,
        "config": Config(
            retries={"max_attempts": 5, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=CONNECTIONS,
        ),
    }
    if credentials:
        options.update(
            aws_access_key_id=credentials["access_key_id"],
            aws_secret_access_key=credentials["secret_access_key"],
            aws_session_token=credentials.get("session_token") or None,
        )
    return boto3.client("s3", **options)


def explain(error: Exception, location: Location) -> S3Error:
    """What an S3 failure means for the partner, with S3's own error code."""
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code in DENIED:
            return S3Error(f"S3 refused access to {location} ({code}): check the credentials and the bucket's policy.")
        if code in MISSING:
            return S3Error(f"{location} does not exist ({code}).")
        return S3Error(f"S3 answered {code or 'an error'} for {location}.")
    return S3Error(f"S3 could not be reached for {location}: {error}.")


def stream(
    uri: str,
    credentials: dict | None,
    into: BinaryIO,
    *,
    max_bytes: int,
    of: str = "a dataset",
    on_length: Callable[[int], None] | None = None,
) -> int:
    """An object's bytes into `into`, in order as they arrive (lent its buffers where it takes them:
    `write_lent`), read in parallel ranged GETs; its size. `on_length` hears the size before a byte is
    written; an object larger than `max_bytes` (the limit for `of`) is refused before one is read."""
    location = parse(uri)
    s3 = client(credentials)
    try:
        head = s3.head_object(Bucket=location.bucket, Key=location.key)
    except (ClientError, BotoCoreError) as error:
        raise explain(error, location) from None
    size = head["ContentLength"]
    if size > max_bytes:
        raise S3Error(over_limit(str(location), size, max_bytes, of))
    if on_length:
        on_length(size)
    reads = _Parts(s3, location, head["ETag"])
    bounds = [(start, min(start + PART_BYTES, size)) for start in range(0, size, PART_BYTES)]
    if bounds:
        reassembly.fetch_in_parts(bounds, reads.connection, _hand_on(into), connections=CONNECTIONS, chunk=CHUNK)
    return size


def _hand_on(into: BinaryIO) -> reassembly.HandOn:
    if lend := getattr(into, "write_lent", None):
        return lend

    def write(data: memoryview, done: reassembly.Done) -> None:
        into.write(data)
        done()

    return write


class _Parts:
    """The ranged GETs of one object's parts, each with If-Match on its ETag."""

    def __init__(self, s3, location: Location, etag: str):
        self.s3, self.location, self.etag = s3, location, etag

    def connection(self, parts: Iterator[reassembly.Part]) -> None:
        for part in parts:
            drops = 0
            while part.left:
                try:
                    self._read(part)
                except BotoCoreError as error:  # a connection that dropped, or timed out, mid-part
                    drops += 1
                    if drops > RETRIES:
                        raise explain(error, self.location) from None

    def _read(self, part: reassembly.Part) -> None:
        try:
            answer = self.s3.get_object(
                Bucket=self.location.bucket,
                Key=self.location.key,
                Range=f"bytes={part.position}-{part.stop - 1}",
                IfMatch=self.etag,
            )
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code", "")) in CHANGED:
                raise S3Error(
                    f"{self.location} changed while it was staged (its ETag is no longer {self.etag}); "
                    "stage it again once it is complete."
                ) from None
            raise explain(error, self.location) from None
        body = answer["Body"]
        try:
            while part.left:
                space = part.space()
                data = body.read(len(space))  # botocore hands out bytes: one copy, into a page-aligned buffer
                if not data:
                    raise S3Error(f"{self.location} ended {part.left:,} bytes short of its part.")
                space[: len(data)] = data
                part.filled(len(data))
        finally:
            body.close()


def download_prefix(uri: str, credentials: dict | None, into: BinaryIO, progress: StagingProgress) -> int:
    """Every object under a prefix gathered into `into` as one dataset (see `gather`); its size."""
    return gather(client(credentials), parse(uri), into, progress)


def copy_model(uri: str, credentials: dict | None, into: BinaryIO) -> None:
    """A model at `uri` copied into `into`: one object (the folder's .zip or .tar) as it is, or every
    object under a prefix (the folder itself) packed into a tar named by their paths under it. Held
    to the model's limits in bytes and files before a byte is read."""
    location = parse(uri)
    if not location.is_prefix:
        stream(uri, credentials, into, max_bytes=settings.E31_MAX_MODEL_BYTES, of="a model")
        return
    s3 = client(credentials)
    objects = _model_objects(s3, location)
    with tarfile.open(fileobj=into, mode="w") as archive:
        for item in objects:
            member = tarfile.TarInfo(item["Key"][len(location.key) :])
            member.size = item["Size"]
            archive.addfile(member, _body(s3, location.bucket, item["Key"]))


def _model_objects(s3, location: Location) -> list[dict]:
    """The files of a model folder under a prefix, in key order, within the model's limits."""
    limits = settings.E31_MAX_MODEL_BYTES, "a model", settings.E31_MODEL_MAX_FILES, "files for a model"
    return _listed(s3, location, *limits, hidden=lambda key: False)


def _objects(s3, location: Location) -> list[dict]:
    """The objects under a prefix, in key order, within the dataset's limits; hidden files (Spark's _SUCCESS)
    left out."""
    limits = settings.E31_MAX_DATASET_BYTES, "a dataset", settings.E31_ARCHIVE_MAX_MEMBERS, "objects"
    return _listed(s3, location, *limits, hidden=lambda key: PurePosixPath(key).name.startswith(("_", ".")))


def _listed(
    s3, location: Location, max_bytes: int, of: str, max_count: int, counted: str, hidden: Callable[[str], bool]
) -> list[dict]:
    """The objects under a prefix but folder markers and `hidden` ones, in key order; S3Error once their bytes
    so far pass `max_bytes` (the limit for `of`) or their count `max_count` (of `counted`), or when there are
    none."""
    found, total = [], 0
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=location.key):
            for item in page.get("Contents", []):
                if item["Key"].endswith("/") or hidden(item["Key"]):
                    continue
                found.append(item)
                total += item["Size"]
                if total > max_bytes:
                    raise S3Error(over_limit(f"{location} (at {item['Key']})", total, max_bytes, of))
                if len(found) > max_count:
                    raise S3Error(f"{location} holds more than {max_count:,} {counted}.")
    except (ClientError, BotoCoreError) as error:
        raise explain(error, location) from None
    if not found:
        raise S3Error(f"{location} holds no objects.")
    return sorted(found, key=lambda item: item["Key"])


def _kind(key: str) -> str:
    suffix = PurePosixPath(key).suffix.lower()
    if archives.is_image(key):
        return "images"
    return {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}.get(suffix, "")


def gather(s3, location: Location, into: BinaryIO, progress: StagingProgress) -> int:
    """Every object under the prefix as one dataset in `into`: images as a tar of them, CSV parts
    under their one header, JSONL parts one after another, Parquet parts as one file. Objects of
    other kinds, or of two kinds at once, are refused by name."""
    objects = _objects(s3, location)
    kinds = {item["Key"]: _kind(item["Key"]) for item in objects}
    unknown = [key for key, kind in kinds.items() if not kind]
    if unknown:
        raise S3Error(f"{location} holds {unknown[0]!r}, which is no image, CSV, JSONL or Parquet file.")
    if len(set(kinds.values())) > 1:
        raise S3Error(f"{location} mixes {' and '.join(sorted(set(kinds.values())))} files; stage one kind at a time.")
    kind = next(iter(kinds.values()))
    progress.phase("downloading", sum(item["Size"] for item in objects))
    {"images": _gather_images, "parquet": _gather_parquet}.get(kind, _gather_lines)(
        s3, location, objects, into, progress
    )
    return into.tell()


def _body(s3, bucket: str, key: str):
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"]
    except (ClientError, BotoCoreError) as error:
        raise explain(error, Location(bucket, key)) from None


def _gather_images(s3, location: Location, objects: list[dict], into: BinaryIO, progress: StagingProgress) -> None:
    """Images into a tar, named by their path under the prefix."""
    done = 0
    with tarfile.open(fileobj=into, mode="w") as archive:
        for item in objects:
            member = tarfile.TarInfo(item["Key"][len(location.key) :])
            member.size = item["Size"]
            archive.addfile(member, _body(s3, location.bucket, item["Key"]))
            done += item["Size"]
            progress.advance(done)


def _gather_lines(s3, location: Location, objects: list[dict], into: BinaryIO, progress: StagingProgress) -> None:
    """CSV parts under the first part's header (each part's own must be the same), or JSONL parts."""
    header, done = None, 0
    for item in objects:
        body = _body(s3, location.bucket, item["Key"])
        first = body.readline()
        if item["Key"].lower().endswith((".csv", ".tsv")):
            if header is None:
                header = first
            elif first.rstrip(b"\r\n") != header.rstrip(b"\r\n"):
                raise S3Error(f"s3://{location.bucket}/{item['Key']} has another header than the first part.")
            else:
                first = b""  # one header for all the parts
        into.write(first)
        while block := body.read(1024 * 1024):
            into.write(block)
        if not _ends_with_newline(into):
            into.write(b"\n")
        done += item["Size"]
        progress.advance(done)


def _ends_with_newline(stream: BinaryIO) -> bool:
    position = stream.tell()
    if position == 0:
        return True
    stream.seek(position - 1)
    last = stream.read(1)
    return last == b"\n"


def _gather_parquet(s3, location: Location, objects: list[dict], into: BinaryIO, progress: StagingProgress) -> None:
    """Parquet parts rewritten into one file, a row group at a time; parts must share one schema."""
    writer, done = None, 0
    try:
        for item in objects:
            part = pq.ParquetFile(io.BufferedReader(RangedS3File(s3, location.bucket, item["Key"]), 8 * 1024**2))
            if writer is None:
                writer = pq.ParquetWriter(into, part.schema_arrow)
            elif part.schema_arrow != writer.schema:
                raise S3Error(f"s3://{location.bucket}/{item['Key']} has another schema than the first part.")
            for group in range(part.num_row_groups):
                writer.write_table(part.read_row_group(group))
            done += item["Size"]
            progress.advance(done)
    except (pa.ArrowException, OSError) as error:
        raise S3Error(f"A Parquet part under {location} could not be read: {error}.") from None
    except (ClientError, BotoCoreError) as error:
        raise explain(error, location) from None
    finally:
        if writer is not None:
            writer.close()
