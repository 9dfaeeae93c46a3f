"""Data the tests generate: numbered CSV records, pictures, and zip or tar archives of files."""

import io
import tarfile
import zipfile

from PIL import Image


def csv_bytes(rows: int = 2000) -> bytes:
    return ("id,text\n" + "".join(f"{n},record {n}\n" for n in range(1, rows + 1))).encode()


def picture(size=(640, 480), kind="PNG", colour=(200, 30, 30), exif: bool = False) -> bytes:
    image = Image.new("RGB", size, colour)
    width, height = size
    for n, shade in enumerate((40, 220, 90, 160)):  # blocks in proportion to the size: the same picture at any size
        image.paste((shade, shade, 255 - shade), (n * width // 5, n * height // 6, (n + 2) * width // 5, height))
    out = io.BytesIO()
    extra = {}
    if exif:
        tags = Image.Exif()
        tags[0x010F] = "Secret Camera Maker"
        extra["exif"] = tags.tobytes()
    image.save(out, kind, **extra)
    return out.getvalue()


def zipped(files: dict[str, bytes], compression=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


def tarred(files: dict[str, bytes], extra: list[tarfile.TarInfo] = ()) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for info in extra:
            archive.addfile(info)
    return out.getvalue()
