"""Uploads: a dataset or a model file sent to the portal, streamed to a temporary file under a size
limit, inspected, then put in storage. Resumable uploads (tus) are in resumable.py."""

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import BinaryIO

from django.conf import settings
from django.core.exceptions import SuspiciousFileOperation
from django.core.files import File
from django.core.files.storage import default_storage
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.utils.text import get_valid_filename

from jobs.staging import compressed
from jobs.staging.formats import SAMPLE_BYTES, FormatError, detect
from portal import units
from portal.text import clean_name


def too_large_message() -> str:
    return f"The file is larger than the {units.limit(settings.E31_MAX_UPLOAD_BYTES)} upload limit."


class SizeLimitUploadHandler(FileUploadHandler):
    """Stops an upload as soon as it passes E31_MAX_UPLOAD_BYTES and tells the view why."""

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        self.request.upload_too_large = False
        self.received = 0

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > settings.E31_MAX_UPLOAD_BYTES:
            self.request.upload_too_large = True
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size):
        return None


def inspect(stream: BinaryIO, name: str) -> dict:
    """The layout a dataset's first bytes show (a compressed one's, uncompressed), or FormatError saying what
    is wrong with it."""
    stream.seek(0)
    head = compressed.open_decompressed(stream, name).read(SAMPLE_BYTES + 1)
    stream.seek(0)
    return detect(head[:SAMPLE_BYTES], at_eof=len(head) <= SAMPLE_BYTES, name=name)


def safe_name(name: str) -> str:
    """A file's name as it may be stored and shown: no folders, no invisible characters, composed (NFC) so an
    accent typed as a combining mark is kept."""
    try:
        return get_valid_filename(PurePath(clean_name(name)).name)[:200]
    except SuspiciousFileOperation:  # nothing usable is left of it: "", "..", "/"
        return "data"


def _storage_path(name: str) -> str:
    return f"uploads/{uuid.uuid4().hex}/{safe_name(name)}"


def store_upload(stream: BinaryIO, name: str) -> str:
    """Put an uploaded file where any worker can read it; staging copies it into job storage."""
    path = _storage_path(name)
    stream.seek(0)
    return default_storage.save(path, File(stream, name=path))


def store_model(stream: BinaryIO, name: str) -> str:
    """Put a job's model file where every worker can read it."""
    path = f"models/{uuid.uuid4().hex}/{safe_name(name)}"
    stream.seek(0)
    return default_storage.save(path, File(stream, name=path))


@contextlib.contextmanager
def local_copy(stream: BinaryIO) -> Iterator[str]:
    """The stream as a file on this disk: its own when it has one (a large form upload, a file the
    CLI opened), else a temporary copy."""
    own = getattr(stream, "temporary_file_path", None)
    if own is not None:
        yield own()
        return
    name = getattr(stream, "name", None)
    if isinstance(name, str) and os.path.isfile(name):
        yield name
        return
    with tempfile.NamedTemporaryFile(prefix="e31-model-") as copy:
        stream.seek(0)
        shutil.copyfileobj(stream, copy, 1024 * 1024)
        copy.flush()
        stream.seek(0)
        yield copy.name


class _LocalFile(File):
    """A file on this machine's disk: the filesystem storage moves it instead of copying it."""

    def temporary_file_path(self) -> str:
        return self.file.name


def store_file(local: Path, name: str) -> str:
    """Put a finished resumable upload in storage, by a move where the storage is on this disk."""
    path = _storage_path(name)
    with local.open("rb") as handle:
        stored = default_storage.save(path, _LocalFile(handle, name=path))
    local.unlink(missing_ok=True)
    return stored


__all__ = [
    "FormatError",
    "SizeLimitUploadHandler",
    "inspect",
    "local_copy",
    "store_model",
    "store_upload",
    "too_large_message",
]
