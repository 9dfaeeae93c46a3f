"""S3 sources: `s3://bucket/key`, read with boto3 in parallel ranged GETs.

A partner reads from their own bucket with credentials they give for the job; they are stored
encrypted (Fernet, with a key derived from the portal's secret key), used only to stage, and wiped
when staging ends. Without credentials, an organisation reads from the operator's buckets
(E31_STAGING_S3_BUCKETS, with the portal's own AWS credentials), and there only under `<slug>/`.
"""

import base64
import hashlib
import json
import re
import time
from typing import BinaryIO, NamedTuple

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from s3transfer.manager import TransferManager
from s3transfer.subscribers import BaseSubscriber

from jobs.staging.progress import StagingProgress
from jobs.staging.uploads import over_dataset_limit

BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "403"}
MISSING = {"NoSuchKey", "NoSuchBucket", "404", "NotFound"}
TRANSFER = TransferConfig(multipart_threshold=8 * 1024**2, multipart_chunksize=16 * 1024**2, max_concurrency=8)


class S3Error(ValueError):
    """The S3 location cannot be staged; the message is for the user."""


class Location(NamedTuple):
    bucket: str
    key: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def parse(uri: str) -> Location:
    bucket, _, key = uri.strip()[len("s3://") :].partition("/")
    if not uri.lower().startswith("s3://") or not BUCKET.match(bucket):
        raise S3Error(f"{uri} is not an S3 URI: write s3://bucket/key, with the bucket's name in lower case.")
    if not key:
        raise S3Error(f"{uri} names a bucket but no object: write s3://{bucket}/path/to/data.csv.")
    if key.endswith("/"):
        raise S3Error(f"{uri} is a prefix; give one object (s3://{bucket}/{key}data.csv).")
    return Location(bucket, key)


def check(uri: str, slug: str, credentials: dict | None) -> Location:
    """At submit time: the URI's form, and without credentials, the organisation's place in the bucket."""
    location = parse(uri)
    if credentials:
        missing = [name for name in ("access_key_id", "secret_access_key") if not credentials.get(name)]
        if missing:
            raise S3Error(f"Give the S3 {missing[0].replace('_', ' ')} along with the rest of the credentials.")
        return location
    if location.bucket not in settings.E31_STAGING_S3_BUCKETS:
        raise S3Error(f"Give credentials that can read s3://{location.bucket}/: it is not one of the portal's buckets.")
    if not location.key.startswith(f"{slug}/"):
        raise S3Error(f"In s3://{location.bucket}/ your organisation reads only under s3://{location.bucket}/{slug}/.")
    return location


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"e31 staging credentials\0" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(credentials: dict) -> str:
    return _fernet().encrypt(json.dumps(credentials).encode()).decode()


def unseal(sealed: str) -> dict:
    try:
        return json.loads(_fernet().decrypt(sealed.encode()))
    except InvalidToken:
        raise S3Error("The S3 credentials given with the job can no longer be read; submit it again.") from None


def client(credentials: dict | None):
    options = {
        "endpoint_url": settings.E31_STAGING_S3_ENDPOINT_URL or None,
        "region_name": (credentials or {}).get("region") or settings.E31_STAGING_S3_REGION,
        "config": Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10, read_timeout=60),
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


class _Counted(BaseSubscriber):
    def __init__(self):
        self.bytes = 0

    def on_progress(self, bytes_transferred: int, **kwargs) -> None:
        self.bytes += bytes_transferred


def download(uri: str, credentials: dict | None, into: BinaryIO, progress: StagingProgress) -> int:
    """Copy the object into `into` in parallel ranged GETs, reporting bytes as they arrive; its size."""
    location = parse(uri)
    s3 = client(credentials)
    try:
        size = s3.head_object(Bucket=location.bucket, Key=location.key)["ContentLength"]
    except (ClientError, BotoCoreError) as error:
        raise explain(error, location) from None
    if size > settings.E31_MAX_DATASET_BYTES:
        raise S3Error(over_dataset_limit(str(location), size))
    progress.phase("downloading", size)
    counted = _Counted()
    with TransferManager(s3, TRANSFER) as manager:
        future = manager.download(location.bucket, location.key, into, subscribers=[counted])
        try:
            while not future.done():
                progress.advance(counted.bytes)  # progress is written from here, not the transfer threads
                time.sleep(0.2)
            future.result()
        except (ClientError, BotoCoreError) as error:
            raise explain(error, location) from None
        except BaseException:
            future.cancel()
            raise
    progress.advance(size)
    return size
