"""Parquet datasets: records are rows, numbered from 1; a row's "line" is its row number.

Shards are row ranges, cut anywhere (not only at row-group boundaries); a slot reads the row groups
its range touches and no others. Values come as Python objects (ints, floats, dates, ...), as a
JSONL record's do, so processors read a row as a dict of column to value.
"""

import bisect
import json
from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.processors import Record
from jobs.staging.formats import FormatError

BATCH_ROWS = 65_536


def open_file(stream: BinaryIO) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(stream)
    except (pa.ArrowException, OSError) as error:
        raise FormatError(f"This is not a readable Parquet file: {error}.") from None


def describe(stream: BinaryIO) -> dict:
    """The layout of a Parquet file: its columns and the rows in each row group."""
    parquet = open_file(stream)
    return {
        "format": "parquet",
        "columns": parquet.schema_arrow.names,
        "row_groups": [parquet.metadata.row_group(index).num_rows for index in range(parquet.num_row_groups)],
    }


def iter_rows(stream: BinaryIO, layout: dict, first_position: int = 1, count: int | None = None) -> Iterator[Record]:
    """The rows from `first_position` (1-based), `count` of them or to the end, read row group by row group."""
    parquet = open_file(stream)
    ends = _row_group_ends(layout["row_groups"])
    total = ends[-1] if ends else 0
    last = total if count is None else min(total, first_position - 1 + count)
    position = first_position
    group = bisect.bisect_right(ends, first_position - 1)
    try:
        while position <= last:
            start = ends[group - 1] if group else 0
            table = parquet.read_row_group(group)
            for batch in table.slice(position - 1 - start, last - (position - 1)).to_batches(BATCH_ROWS):
                for value in batch.to_pylist():
                    yield Record(position, position, value, None, 0, 0, position)
                    position += 1
            group += 1
    except (pa.ArrowException, OSError) as error:
        raise FormatError(f"Row {position} could not be read from the Parquet file: {error}.") from None


def _row_group_ends(row_groups: list[int]) -> list[int]:
    ends, total = [], 0
    for rows in row_groups:
        total += rows
        ends.append(total)
    return ends


def raw(record: Record) -> str:
    """A rejected row as the rejects file shows it: JSON."""
    return json.dumps(record.value, ensure_ascii=False, default=str)
