"""Reading part of a file in job storage without fetching all of it.

On the filesystem a file is opened and seeked as usual. On S3, django-storages' file downloads the
whole object at the first read, which for a slot reading one shard of a 50 GB dataset is 50 GB; here
each read is a ranged GET of just the bytes asked for, so a slot fetches its shard and a Parquet
reader its footer and row groups.
"""

import io

from django.core.files.storage import default_storage
from storages.utils import clean_name


class RangedS3File(io.RawIOBase):
    """A seekable, read-only view of one S3 object; each read is a ranged GET."""

    def __init__(self, client, bucket: str, key: str):
        self.client, self.bucket, self.key = client, bucket, key
        self.size = client.head_object(Bucket=bucket, Key=key)["ContentLength"]
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer) -> int:
        end = min(self.size, self.position + len(buffer))
        if end <= self.position:
            return 0
        answer = self.client.get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={self.position}-{end - 1}")
        data = answer["Body"].read()
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def open_for_ranges(path: str):
    """A storage file to seek in and read parts of: ranged GETs on S3, the file itself elsewhere."""
    bucket = getattr(default_storage, "bucket", None)
    if bucket is None:
        return default_storage.open(path, "rb")
    key = default_storage._normalize_name(clean_name(path))  # as S3Storage names its objects
    raw = RangedS3File(default_storage.connection.meta.client, bucket.name, key)
    return io.BufferedReader(raw, buffer_size=8 * 1024 * 1024)
