"""Image collections: a .zip or a .tar of images, read safely.

Every member is checked before any is read: no path that leaves the archive (absolute, or through
`..`), no symbolic or hard links, no devices, at most E31_ARCHIVE_MAX_MEMBERS members, at most
E31_ARCHIVE_MAX_BYTES once expanded, and no zip member that expands more than MAX_RATIO times
(a zip bomb). The records are the image members, by their suffix, in archive order; other files
are left aside. A shard of a tar starts at its first member's header, so a slot reads only its part.
"""

import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import BinaryIO, NamedTuple

from django.conf import settings

from jobs.processors import Record
from jobs.staging.formats import FormatError
from portal import units

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff"})
ZIP_MAGIC = b"PK\x03\x04"
MAX_RATIO = 200  # deflate reaches about 1000x on zeros; real images compress far less


class Member(NamedTuple):
    name: str
    size: int
    offset: int  # where the member's header starts in the archive


def kind_of(head: bytes) -> str | None:
    if head.startswith(ZIP_MAGIC):
        return "zip"
    if head[257:262] == b"ustar":
        return "tar"
    return None


def is_image(name: str) -> bool:
    return PurePosixPath(name).suffix.lower() in IMAGE_SUFFIXES


def _check_name(name: str) -> None:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts:
        raise FormatError(f"The archive holds {name!r}, a path outside the archive; it is refused.")


class _Limits:
    def __init__(self):
        self.members = 0
        self.bytes = 0

    def add(self, name: str, size: int) -> None:
        self.members += 1
        self.bytes += size
        if self.members > settings.E31_ARCHIVE_MAX_MEMBERS:
            raise FormatError(f"The archive holds more than {settings.E31_ARCHIVE_MAX_MEMBERS:,} members.")
        if self.bytes > settings.E31_ARCHIVE_MAX_BYTES:
            limit = units.limit(settings.E31_ARCHIVE_MAX_BYTES)
            raise FormatError(f"The archive expands to more than {limit} (at {name!r}); it is refused.")


def members(stream: BinaryIO, kind: str) -> list[Member]:
    """The image members of the archive, once every member has passed the checks."""
    found = _zip_members(stream) if kind == "zip" else _tar_members(stream)
    if not found:
        raise FormatError(f"The archive holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}).")
    if too_big := next((member for member in found if member.size > settings.E31_IMAGE_MAX_BYTES), None):
        raise FormatError(
            f"The archive's image {too_big.name!r} is {units.size(too_big.size)}; "
            f"one image may be up to {units.limit(settings.E31_IMAGE_MAX_BYTES)}."
        )
    return found


def _zip_members(stream: BinaryIO) -> list[Member]:
    limits, found = _Limits(), []
    try:
        with zipfile.ZipFile(stream) as archive:
            for info in archive.infolist():
                _check_name(info.filename)
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise FormatError(f"The archive holds {info.filename!r}, a symbolic link; it is refused.")
                limits.add(info.filename, info.file_size)
                if info.file_size > 1024 * 1024 and info.file_size > MAX_RATIO * max(1, info.compress_size):
                    ratio = info.file_size // max(1, info.compress_size)
                    raise FormatError(
                        f"The archive looks like a zip bomb: {info.filename!r} expands {ratio:,} times; it is refused."
                    )
                if not info.is_dir() and is_image(info.filename):
                    found.append(Member(info.filename, info.file_size, info.header_offset))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as error:
        raise FormatError(f"This is not a readable zip archive: {error}.") from None
    return found


def _tar_members(stream: BinaryIO) -> list[Member]:
    limits, found = _Limits(), []
    try:
        with tarfile.open(fileobj=stream, mode="r:") as archive:
            for info in archive:
                _check_name(info.name)
                if info.issym() or info.islnk():
                    raise FormatError(f"The archive holds {info.name!r}, a link; it is refused.")
                if info.isdev():
                    raise FormatError(f"The archive holds {info.name!r}, a device; it is refused.")
                limits.add(info.name, info.size)
                if info.isfile() and is_image(info.name):
                    found.append(Member(info.name, info.size, info.offset))
    except (tarfile.TarError, EOFError) as error:
        raise FormatError(f"This is not a readable tar archive: {error}.") from None
    return found


def iter_images(stream: BinaryIO, layout: dict, start: int, first_position: int, count: int) -> Iterator[Record]:
    """`count` image records from `first_position`; a tar is read from the member header at `start`."""
    position, last = first_position, first_position + count - 1
    if layout["archive"] == "zip":
        with zipfile.ZipFile(stream) as archive:
            infos = archive.infolist()
            images = [info for info in infos if not info.is_dir() and is_image(info.filename)]
            for info in images[first_position - 1 : last]:
                value = {"name": info.filename, "data": archive.read(info)}
                yield Record(position, position, value, None, 0, 0, position)
                position += 1
        return
    stream.seek(start)
    with tarfile.open(fileobj=stream, mode="r:") as archive:
        for info in archive:
            if position > last:
                return
            if info.isfile() and is_image(info.name):
                data = archive.extractfile(info).read()
                yield Record(position, position, {"name": info.name, "data": data}, None, 0, 0, position)
                position += 1
