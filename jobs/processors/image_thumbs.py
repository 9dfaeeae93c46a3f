"""image-thumbs: every image of a collection resized to a maximum side, converted, stripped of its
metadata (EXIF, ICC, comments: the thumbnail is encoded anew from the pixels only), with a
perceptual hash (a 64-bit difference hash) to find near-duplicates.

Images are opened with Pillow's decompression-bomb warning turned into an error, so an image that
claims more than Image.MAX_IMAGE_PIXELS pixels is rejected, named, before it is decoded. An image
Pillow cannot read is rejected with Pillow's reason. Output: thumbnails.zip, and a Parquet index of
the images naming each one's thumbnail in the zip.
"""

import io
import os
import warnings
import zipfile
from pathlib import PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageOps, UnidentifiedImageError

from jobs.processors.base import Batch, Context, Param, ParamError, Processor, Record

FORMATS = {"webp": "WEBP", "jpeg": "JPEG", "png": "PNG"}
SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("thumb_width", pa.int32()),
        ("thumb_height", pa.int32()),
        ("format", pa.string()),
        ("phash", pa.string()),
        ("thumbnail", pa.binary()),
    ]
)


def _member_name(row: dict, taken: set[str]) -> str:
    """The image's path with the thumbnail's suffix; a path met twice gets its record number too."""
    path = PurePosixPath(row["name"].replace("\\", "/").lstrip("/"))
    name = str(path.with_suffix("." + row["format"]))
    if name in taken:
        name = str(path.with_name(f"{path.stem}-{row['_record']}.{row['format']}"))
    taken.add(name)
    return name


def difference_hash(image: Image.Image) -> str:
    """64 bits, one per neighbouring pair of a 9 × 8 grey image: is the left one brighter."""
    small = image.convert("L").resize((9, 8), Image.Resampling.LANCZOS)
    pixels = small.tobytes()  # one byte per pixel, row after row
    bits = 0
    for row in range(8):
        for column in range(8):
            bits = (bits << 1) | (pixels[row * 9 + column] > pixels[row * 9 + column + 1])
    return f"{bits:016x}"


def thumbnail(data: bytes, max_side: int, kind: str, quality: int) -> dict:
    """One image made into a thumbnail and its index row; ValueError says why it cannot be."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                image.load()
                width, height = image.size
                upright = ImageOps.exif_transpose(image)
                small = upright.copy()
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
            raise ValueError(f"a decompression bomb ({error})") from None
        except (UnidentifiedImageError, OSError, SyntaxError) as error:
            raise ValueError(f"not a readable image ({error})") from None
    small.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    if kind == "jpeg" and small.mode not in ("RGB", "L"):
        small = small.convert("RGB")
    elif small.mode not in ("RGB", "RGBA", "L", "LA"):
        small = small.convert("RGBA")
    out = io.BytesIO()
    small.save(out, FORMATS[kind], quality=quality)  # pixels only: no EXIF, ICC or comments are passed on
    return {
        "width": width,
        "height": height,
        "thumb_width": small.width,
        "thumb_height": small.height,
        "format": kind,
        "phash": difference_hash(small),
        "thumbnail": out.getvalue(),
    }


class ImageThumbs(Processor):
    name = "image-thumbs"
    title = "Image thumbnails"
    description = (
        "Resizes every image of a .zip or .tar to a maximum side, converts it, strips its metadata and "
        "computes a perceptual hash. Output: a zip of the thumbnails and a Parquet index of them."
    )
    input_formats = ("images",)
    batch_size = 64
    rewrites_output = True
    params = (
        Param("max_side", int, 256, "Longest side of a thumbnail, in pixels.", minimum=8, maximum=4096),
        Param("format", str, "webp", "webp, jpeg or png."),
        Param("quality", int, 85, "Encoder quality for webp and jpeg, 1 to 100.", minimum=1, maximum=100),
    )

    def validate_params(self, raw):
        params = super().validate_params(raw)
        params["format"] = params["format"].strip().lower()
        if params["format"] not in FORMATS:
            raise ParamError(f"format must be one of {', '.join(FORMATS)}, not {raw.get('format')!r}")
        return params

    def output_schema(self, context: Context) -> pa.Schema:
        return SCHEMA

    def finish_output(self, output_path: str, scratch: str) -> list[str]:
        """The thumbnails move into thumbnails.zip; output.parquet keeps an index of them, each row
        naming its file in the zip (the image's path, with the thumbnail's suffix)."""
        bundle, index = os.path.join(scratch, "thumbnails.zip"), os.path.join(scratch, "index.parquet")
        taken: set[str] = set()
        with zipfile.ZipFile(bundle, "w", zipfile.ZIP_STORED) as archive:
            source = pq.ParquetFile(output_path)
            schema = source.schema_arrow.remove(source.schema_arrow.get_field_index("thumbnail"))
            schema = schema.append(pa.field("file", pa.string()))
            with pq.ParquetWriter(index, schema) as writer:
                for group in range(source.num_row_groups):
                    table = source.read_row_group(group)
                    files = []
                    for row in table.select(["_record", "name", "format", "thumbnail"]).to_pylist():
                        name = _member_name(row, taken)
                        archive.writestr(name, row["thumbnail"])
                        files.append(name)
                    table = table.drop_columns(["thumbnail"]).append_column("file", pa.array(files, pa.string()))
                    writer.write_table(table)
        os.replace(index, output_path)
        return [bundle]

    def process_batch(self, records: list[Record], context: Context) -> Batch:
        params = context.params
        rows, kept, rejects = [], [], []
        for record in records:
            try:
                row = thumbnail(record.value["data"], params["max_side"], params["format"], params["quality"])
            except ValueError as error:
                rejects.append((record, f"{record.value['name']}: {error}"))
                continue
            rows.append({"name": record.value["name"], **row})
            kept.append(record.position)
        return Batch(table=pa.Table.from_pylist(rows, schema=SCHEMA), kept=kept, rejects=rejects)
