"""Image collections: a .zip or .tar of images, staged with every member checked (traversal, links,
devices, bombs, limits) and made into thumbnails by image-thumbs, each bad image rejected by name."""

import csv
import io
import struct
import tarfile
import zipfile
import zlib

import pyarrow.parquet as pq
import pytest
from PIL import Image

from jobs.models import Job, State
from jobs.processors.image_thumbs import difference_hash, thumbnail
from jobs.staging import archives
from jobs.staging.formats import FormatError
from tests.datasets import picture, tarred, zipped
from tests.support import OutputZip, job_form, wait_for_end


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims width × height pixels: enough for Pillow to judge it before decoding."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IEND", b"")
    )


def collection(count: int = 30) -> dict[str, bytes]:
    files = {
        f"photos/{n:03d}.{'png' if n % 2 else 'jpg'}": picture(kind="PNG" if n % 2 else "JPEG") for n in range(count)
    }
    files["photos/README.txt"] = b"not an image: left aside"
    files["photos/broken.png"] = b"\x89PNG\r\n\x1a\nthis is not the rest of a png"
    files["photos/bomb.png"] = png_header_only(30_000, 30_000)
    return files


def test_it_lists_the_images_of_a_zip_and_a_tar_and_leaves_other_files_aside():
    files = collection(4)
    for data in (zipped(files), tarred(files)):
        kind = archives.kind_of(data)
        found = archives.members(io.BytesIO(data), kind)
        assert [member.name for member in found] == [name for name in files if not name.endswith(".txt")]


def symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def device(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info


def zip_with_symlink() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        info = zipfile.ZipInfo("photos/link.png")
        info.external_attr = 0o120777 << 16
        archive.writestr(info, "/etc/passwd")
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (zipped({"../../etc/cron.d/x.png": picture()}), "a path outside the archive"),
        (zipped({"/etc/x.png": picture()}), "a path outside the archive"),
        (tarred({"photos/../../x.png": picture()}), "a path outside the archive"),
        (tarred({"a.png": picture()}, [symlink("photos/b.png", "/etc/shadow")]), "'photos/b.png', a link"),
        (tarred({"a.png": picture()}, [device("photos/null")]), "'photos/null', a device"),
        (zip_with_symlink(), "a symbolic link"),
        (zipped({"bomb.png": bytes(50 * 1024 * 1024)}, zipfile.ZIP_DEFLATED), "looks like a zip bomb"),
        (zipped({"notes.txt": b"no images here"}), "The archive holds no images"),
        (b"PK\x03\x04 and then nothing of a zip", "not a readable zip archive"),
    ],
    ids=[
        "zip ..",
        "zip absolute",
        "tar ..",
        "tar symlink",
        "tar device",
        "zip symlink",
        "zip bomb",
        "no images",
        "broken",
    ],
)
def test_it_refuses_an_unsafe_or_broken_archive(data, message):
    with pytest.raises(FormatError, match=message):
        archives.members(io.BytesIO(data), archives.kind_of(data) or "zip")


def test_it_refuses_an_archive_over_the_limits(settings):
    data = zipped({f"{n}.png": picture((8, 8)) for n in range(5)})
    settings.E31_ARCHIVE_MAX_MEMBERS = 4
    with pytest.raises(FormatError, match="more than 4 members"):
        archives.members(io.BytesIO(data), "zip")
    settings.E31_ARCHIVE_MAX_MEMBERS = 100
    settings.E31_ARCHIVE_MAX_BYTES = 100
    with pytest.raises(FormatError, match="expands to more than 100"):
        archives.members(io.BytesIO(data), "zip")


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_it_refuses_an_archive_with_an_image_too_large_to_read_whole(settings, kind):
    pictures = {"small.png": picture((8, 8)), "large.png": picture((64, 64))}
    data = zipped(pictures) if kind == "zip" else tarred(pictures)
    settings.E31_IMAGE_MAX_BYTES = len(pictures["large.png"]) - 1
    with pytest.raises(FormatError, match=r"The archive's image 'large.png' is \d+\xa0bytes; one image may be up to"):
        archives.members(io.BytesIO(data), kind)
    settings.E31_IMAGE_MAX_BYTES = len(pictures["large.png"])
    assert [member.name for member in archives.members(io.BytesIO(data), kind)] == ["small.png", "large.png"]


def test_a_thumbnail_is_resized_converted_and_stripped_of_its_metadata():
    original = picture((1600, 900), "JPEG", exif=True)
    assert b"Secret Camera Maker" in original
    row = thumbnail(original, 256, "webp", 80)
    assert (row["width"], row["height"], row["thumb_width"], row["thumb_height"]) == (1600, 900, 256, 144)
    assert b"Secret Camera Maker" not in row["thumbnail"]
    with Image.open(io.BytesIO(row["thumbnail"])) as small:
        assert small.format == "WEBP" and not small.getexif()
    assert row["phash"] == thumbnail(picture((800, 450), "PNG"), 256, "webp", 80)["phash"], "the same picture, smaller"
    assert row["phash"] != difference_hash(Image.new("RGB", (64, 64), (0, 0, 0)).rotate(45, fillcolor=(255, 255, 255)))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (png_header_only(30_000, 30_000), "a decompression bomb"),
        (png_header_only(10_000, 10_000), "a decompression bomb"),  # over the limit once, under it twice: a warning
        (b"\x89PNG\r\n\x1a\ntruncated", "not a readable image"),
    ],
    ids=["bomb", "bomb-warning", "broken"],
)
def test_it_rejects_an_image_it_must_not_or_cannot_decode(data, reason):
    with pytest.raises(ValueError, match=reason):
        thumbnail(data, 256, "webp", 80)


def thumbs_form(data: bytes, name: str, **params) -> dict:
    form = job_form(data, name=name, work="image-thumbs")
    form.update({"param-image-thumbs-max_side": "64", "param-image-thumbs-format": "jpeg"})
    form.update({f"param-image-thumbs-{key}": value for key, value in params.items()})
    return form


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("pack", [zipped, tarred], ids=["zip", "tar"])
def test_an_image_collection_runs_end_to_end(fleet, partner_client, pack):
    files = collection(30)
    response = partner_client.post("/jobs/new/", thumbs_form(pack(files), f"photos.{pack.__name__[:3]}"))
    assert response.status_code == 302
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    assert (job.input_format, job.records_total) == ("images", 32)
    assert job.shards.count() > 1
    assert job.output_names == ["output.parquet", "rejects.csv", "manifest.json", "thumbnails.zip"]
    output = b"".join(partner_client.get(f"/jobs/{job.pk}/output/output.parquet").streaming_content)
    index = pq.read_table(io.BytesIO(output)).to_pylist()
    images = [name for name in files if name.startswith("photos/0")]
    assert [row["name"] for row in index] == images
    assert all(max(row["thumb_width"], row["thumb_height"]) == 64 and row["format"] == "jpeg" for row in index)
    assert "thumbnail" not in index[0], "the index names each thumbnail; the bytes are in the zip"
    bundle = b"".join(partner_client.get(f"/jobs/{job.pk}/output/thumbnails.zip").streaming_content)
    with zipfile.ZipFile(io.BytesIO(bundle)) as thumbs:
        assert thumbs.namelist() == [row["file"] for row in index]
        assert index[0]["file"] == images[0].rsplit(".", 1)[0] + ".jpeg"
        with Image.open(thumbs.open(index[0]["file"])) as small:
            assert (small.format, small.size) == ("JPEG", (64, 48))
    assert "thumbnails.zip" in OutputZip(partner_client, job).names
    rejects = list(
        csv.DictReader(
            io.StringIO(b"".join(partner_client.get(f"/jobs/{job.pk}/output/rejects.csv").streaming_content).decode())
        )
    )
    assert [(row["raw"], row["reason"].split(":")[1].strip()[:20]) for row in rejects] == [
        ("photos/broken.png", "not a readable image"),
        ("photos/bomb.png", "a decompression bomb"),
    ]


@pytest.mark.django_db
def test_the_form_refuses_an_image_collection_for_a_table_work(partner_client, online_slots):
    response = partner_client.post("/jobs/new/", job_form(zipped(collection(2)), name="photos.zip"))
    assert response.status_code == 400
    assert "clean-table reads csv, jsonl, parquet, not images." in response.content.decode()
    assert not Job.objects.exists()
