"""image-thumbs: every image of a collection resized to a maximum side, converted, stripped of its
metadata (EXIF, ICC, comments: the thumbnail is encoded anew from the pixels only), with a
perceptual hash (a 64-bit difference hash) to find near-duplicates.

Images are opened with Pillow's decompression-bomb warning turned into an error, so an image that
claims more than Image.MAX_IMAGE_PIXELS pixels is rejected, named, before it is decoded. An image
Pillow cannot read is rejected with Pillow's reason. Output: a Parquet index of the images, each
with its thumbnail's bytes.
"""

import io
import warnings

import pyarrow as pa
from PIL import Image, ImageOps, UnidentifiedImageError

from jobs.processors.base import Batch, Context, Param, ParamError, Processor
from jobs.staging.formats import Record

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
        "computes a perceptual hash. Output: a Parquet index with each thumbnail."
    )
    input_formats = ("images",)
    batch_size = 64
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
