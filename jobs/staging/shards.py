"""Shards: where a staged dataset may be cut, how its cut points merge into shards, and each
shard's records read back.

A read of the data (the copy's scan, or describing it) notes a cut point every `grain` records (the
work kind's: fewer for a model's), at a record boundary; from_cuts merges them into shards sized for
the job's GPUs and its measured speed. A slot reads its shard's records with read_shard, in batches;
assembly reads them again to list the records of a shard that failed.
"""

import io
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

from django.conf import settings

from jobs import processors
from jobs.models import Job, Shard
from jobs.processors import Record
from jobs.scheduling import sizing
from jobs.staging import archives, parquet, ranged
from jobs.staging.formats import iter_records

MAX_CUT_POINTS = 10_000  # when a dataset has more, the grain between them doubles


@dataclass
class Cut:
    """A record boundary where a shard may end."""

    records: int
    end_byte: int
    end_line: int


def grain(job: Job) -> int:
    """Records between candidate cut points, and the fewest a shard holds, for the job's work."""
    return processors.get(job.work).grain


def shard_target(job: Job, total: int, smallest: int) -> int:
    """Records per shard: about four shards per GPU, within the size limit, and no more than
    E31_SHARD_SECONDS of work when the job's sample measured its speed. A sample's own shards are
    small (a batch of the work), so it can stop soon after its time is up."""
    if job.kind == Job.Kind.SAMPLE:
        return max(smallest, min(processors.get(job.work).batch_size, settings.E31_SHARD_RECORDS))
    target = min(settings.E31_SHARD_RECORDS, math.ceil(total / (job.gpus * 4)))
    measured = sizing.shard_records(job)
    return max(smallest, min(target, measured) if measured else target)


def tapered(job: Job, target: int, left: int, smallest: int) -> int:
    """Records for the next shard with `left` records to go. On several GPUs the last shards shrink
    with what is left (half a GPU's share), down to an eighth of the target: the GPUs then end within
    a small shard of each other, rather than all but one waiting, held and billed, for a full one."""
    if job.gpus < 2:
        return target
    return max(smallest, target // 8, min(target, math.ceil(left / (2 * job.gpus))))


def from_cuts(job: Job, start: Cut, cuts: list[Cut], total: int, smallest: int | None = None) -> list[dict]:
    """Merge cut points into shards of similar size (see shard_target), smaller at the end (see
    tapered), none under `smallest` records (the job's grain) but the last; a sample's cover only its
    first E31_SAMPLE_MAX_RECORDS records."""
    smallest = grain(job) if smallest is None else smallest
    if job.kind == Job.Kind.SAMPLE:
        cuts = [cut for cut in cuts if cut.records - start.records < settings.E31_SAMPLE_MAX_RECORDS] or cuts[:1]
    full = shard_target(job, total, smallest)
    shards, begin = [], start
    for index, cut in enumerate(cuts):
        last = index == len(cuts) - 1
        following = cuts[index + 1] if not last else None
        target = tapered(job, full, cuts[-1].records - begin.records, smallest)
        size = cut.records - begin.records
        too_big_next = following is not None and (
            following.records - begin.records > target or following.end_byte - begin.end_byte > settings.E31_SHARD_BYTES
        )
        if last or size >= target or too_big_next:
            shards.append(
                {
                    "index": len(shards),
                    "first_record": begin.records + 1,
                    "record_count": size,
                    "first_line": begin.end_line + 1,
                    "start_byte": begin.end_byte,
                    "end_byte": cut.end_byte,
                }
            )
            begin = cut
    return shards


def read_shard(job: Job, shard: Shard) -> tuple[Iterable[Record], Callable[[Record], str]]:
    """The shard's records, and how a rejected one is shown: its text as it was, or a row as JSON."""
    with ranged.open_for_ranges(job.staged_path) as staged:
        if job.layout.get("format") == "parquet":
            return list(parquet.iter_rows(staged, job.layout, shard.first_record, shard.record_count)), parquet.raw
        if job.layout.get("format") == "images":
            images = archives.iter_images(staged, job.layout, shard.start_byte, shard.first_record, shard.record_count)
            return list(images), lambda record: record.value["name"]
        staged.seek(shard.start_byte)
        data = staged.read(shard.end_byte - shard.start_byte)
    records = iter_records(
        io.BytesIO(data),
        job.layout,
        start=shard.start_byte,
        end=shard.end_byte,
        first_position=shard.first_record,
        first_line=shard.first_line,
    )

    def raw(record: Record) -> str:
        text = data[record.start - shard.start_byte : record.end - shard.start_byte]
        return text.decode("utf-8", "replace").rstrip("\r\n")

    return records, raw


def batched(items: Iterable, size: int) -> Iterator[list]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
