"""Describing a staged copy: one read for its layout, the processor's plan, its record count and its
shards. A CSV that the copy scanned on the way is not read again for its records."""

import io
import math

from django.conf import settings
from django.core.files.storage import default_storage

from jobs import processors
from jobs.models import Job
from jobs.staging import archives, fastcsv, parquet, ranged, shards
from jobs.staging.formats import SAMPLE_BYTES, FormatError, detect, iter_records, read_header
from jobs.staging.progress import StagingProgress
from jobs.staging.shards import Cut

NO_RECORDS = "The file holds no records (a header or a schema alone): a dataset needs at least one."


def describe_and_cut(
    job: Job, path: str, progress: StagingProgress, scanned: fastcsv.Scanned | None = None
) -> tuple[dict, dict, int, list[dict]]:
    """Read the staged copy once: its layout, the processor's plan, the record count and the shards
    (a CSV's records counted already when the copy `scanned` them)."""
    processor = processors.get(job.work)
    scanner = processor.scanner(job.params)
    size = default_storage.size(path)
    progress.phase("reading", size)
    with ranged.open_for_ranges(path) as stream:  # on S3, only what is read is fetched
        head = stream.read(SAMPLE_BYTES + 1)
        layout = detect(head[:SAMPLE_BYTES], at_eof=len(head) <= SAMPLE_BYTES, name=job.source_name)
        if layout["format"] not in processor.input_formats:
            raise FormatError(f"{processor.name} reads {', '.join(processor.input_formats)}, not {layout['format']}.")
        stream.seek(0)
        if layout["format"] == "parquet":
            return _describe_parquet(job, stream, scanner, progress)
        if layout["format"] == "images":
            return _describe_images(job, stream, layout, size)
        if layout["format"] == "csv":
            layout["columns"], data_offset, header_lines = read_header(stream, layout)
            if scanner is None or hasattr(scanner, "add_table"):
                try:
                    total, points, sampled = fastcsv.read(
                        stream, layout, data_offset, header_lines, size, getattr(scanner, "add_table", None),
                        progress.advance, every_record=getattr(scanner, "needs_every_record", True),
                        grain=shards.grain(job), max_cuts=shards.MAX_CUT_POINTS, scanned=scanned,
                    )  # fmt: skip
                except fastcsv.Unsure:
                    scanner = processor.scanner(job.params)  # count again from nothing, the exact way
                else:
                    if total == 0:
                        raise FormatError(NO_RECORDS)
                    layout["data_offset"] = data_offset
                    plan = scanner.plan(layout["columns"]) if scanner else {}
                    if scanner and sampled < total:
                        plan["sampled_records"] = sampled
                    cuts = [Cut(*point) for point in points]
                    return layout, plan, total, shards.from_cuts(job, Cut(0, data_offset, header_lines), cuts, total)
            stream.seek(data_offset)
        else:
            data_offset, header_lines = 0, 0
        jsonl_columns: dict[str, None] = {}
        grain, cuts, since, total = shards.grain(job), [], 0, 0
        start = Cut(0, data_offset, header_lines)
        last = start
        for record in iter_records(stream, layout, start=data_offset, first_line=header_lines + 1):
            total += 1
            since += 1
            if not total % 1000:
                progress.advance(record.end)
            if record.error is None:
                if scanner:
                    scanner.add(record.value)
                if type(record.value) is dict:
                    jsonl_columns.update(dict.fromkeys(record.value))
            last = Cut(total, record.end, record.end_line)
            if (
                since >= grain
                or record.end - (cuts[-1].end_byte if cuts else data_offset) >= settings.E31_SHARD_BYTES // 4
            ):
                cuts.append(last)
                since = 0
                if len(cuts) > shards.MAX_CUT_POINTS:
                    cuts, grain = cuts[1::2], grain * 2
        # The last record always ends a shard (halving the cut points may have dropped its cut).
        if total and (not cuts or cuts[-1].records != total):
            cuts.append(last)
    if total == 0:
        raise FormatError(NO_RECORDS)
    if layout["format"] == "jsonl":
        layout["columns"] = list(jsonl_columns)
    layout["data_offset"] = data_offset
    plan = scanner.plan(layout["columns"]) if scanner else {}
    return layout, plan, total, shards.from_cuts(job, start, cuts, total)


def _describe_parquet(job: Job, stream, scanner, progress: StagingProgress) -> tuple[dict, dict, int, list[dict]]:
    """A Parquet file's rows are counted in its footer; the scanner, if the work has one, sees each row."""
    layout = parquet.describe(stream)
    total = sum(layout["row_groups"])
    if total == 0:
        raise FormatError("The Parquet file has no rows.")
    if scanner:
        size = stream.seek(0, io.SEEK_END)
        stream.seek(0)
        for record in parquet.iter_rows(stream, layout):
            scanner.add(record.value)
            if not record.position % 10_000:
                progress.advance(size * record.position // total)  # the phase counts bytes
    layout["data_offset"] = 0
    plan = scanner.plan(layout["columns"]) if scanner else {}
    grain = max(shards.grain(job), math.ceil(total / shards.MAX_CUT_POINTS))
    cuts = [Cut(records, 0, records) for records in [*range(grain, total, grain), total]]
    return layout, plan, total, shards.from_cuts(job, Cut(0, 0, 0), cuts, total)


def _describe_images(job: Job, stream, layout: dict, size: int) -> tuple[dict, dict, int, list[dict]]:
    """An image collection: its members checked, the images counted; a tar's shards start at a header."""
    images = archives.members(stream, layout["archive"])
    total = len(images)
    layout.update(columns=["name", "data"], data_offset=0)
    grain = max(1, math.ceil(total / shards.MAX_CUT_POINTS))

    def cut(records: int) -> Cut:
        return Cut(records, images[records].offset if records < total else size, records)

    cuts = [cut(records) for records in [*range(grain, total, grain), total]]
    return layout, {}, total, shards.from_cuts(job, cut(0), cuts, total, smallest=1)
