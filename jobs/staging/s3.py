"""S3 locations: `s3://bucket/key`, checked at submit, and the credentials a partner gives to read them.

A partner reads from their own bucket with credentials they give for the job; they are stored
encrypted (portal.crypto: Fernet, with a key derived from the portal's secret key), used only to
stage, and wiped when staging ends. Without credentials, an organisation reads from the operator's buckets
(E31_STAGING_S3_BUCKETS, with the portal's own AWS credentials), and there only under `<slug>/`.
Reading them is `jobs.staging.s3_reads`, which loads boto3: the web and the workers that never read S3
do not.
"""

import json
import re
from typing import NamedTuple

from django.conf import settings

from portal import crypto

BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
# A region's name as botocore checks it, which would otherwise fail the job at staging.
REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")


class S3Error(ValueError):
    """The S3 location cannot be staged; the message is for the user."""


class Location(NamedTuple):
    bucket: str
    key: str

    @property
    def is_prefix(self) -> bool:
        """`s3://bucket/folder/` stages every object under the folder as one dataset."""
        return self.key.endswith("/")

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def parse(uri: str) -> Location:
    bucket, _, key = uri.strip()[len("s3://") :].partition("/")
    if not uri.lower().startswith("s3://") or not BUCKET.match(bucket):
        raise S3Error(f"{uri} is not an S3 URI: write s3://bucket/key, with the bucket's name in lower case.")
    if not key:
        raise S3Error(f"{uri} names a bucket but no object: write s3://{bucket}/path/to/data.csv, or a folder/.")
    return Location(bucket, key)


def check(uri: str, slug: str, credentials: dict | None) -> Location:
    """At submit time: the URI's form, and without credentials, the organisation's place in the bucket."""
    location = parse(uri)
    if credentials:
        missing = [name for name in ("access_key_id", "secret_access_key") if not credentials.get(name)]
        if missing:
            raise S3Error(f"Give the S3 {missing[0].replace('_', ' ')} along with the rest of the credentials.")
        if credentials.get("region") and not REGION.fullmatch(credentials["region"]):
            raise S3Error(f"{credentials['region']} is not the name of an S3 region (such as eu-west-1).")
        return location
    if location.bucket not in settings.E31_STAGING_S3_BUCKETS:
        raise S3Error(f"Give credentials that can read s3://{location.bucket}/: it is not one of the portal's buckets.")
    if not location.key.startswith(f"{slug}/") or {".", ".."} & set(location.key.split("/")):
        # S3 reads a key as written, but a proxy or S3-compatible server before it may resolve "..".
        raise S3Error(f"In s3://{location.bucket}/ your organisation reads only under s3://{location.bucket}/{slug}/.")
    return location


SEALED_FOR = "e31 staging credentials"


def seal(credentials: dict) -> str:
    return crypto.seal(SEALED_FOR, json.dumps(credentials).encode())


def unseal(sealed: str) -> dict:
    try:
        return json.loads(crypto.unseal(SEALED_FOR, sealed))
    except crypto.InvalidToken:
        raise S3Error("The S3 credentials given with the job can no longer be read; submit it again.") from None
