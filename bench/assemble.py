"""Assembling a job's output.parquet from its shards' parts (issue 18): stitched without decoding
(jobs.outputs.stitch, what assembly does now) against decoded and encoded again one row group at a
time (what it did before), each with the output's SHA-256, in interleaved rounds.

    .venv/bin/python bench/assemble.py [--rows 1000000,4000000] [--rounds 5]

The parts are clean-table's output of a generated CSV (examples/generate.py) as slots write them:
50,000 records a shard, one row group per 5,000-record batch, the input position in front.
"""

import argparse
import hashlib
import shutil
import statistics
import time
from pathlib import Path

import scratch

scratch.as_a_worker()
scratch.setup()

import pyarrow as pa  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from jobs.outputs.stitch import stitch  # noqa: E402

SHARD, BATCH = 50_000, 5_000


def make_parts(rows: int) -> list[Path]:
    parse = pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=lambda row: "skip")
    table = pacsv.read_csv(scratch.make_csv(rows), parse_options=parse)
    table = table.add_column(0, "_record", pa.array(range(1, table.num_rows + 1), pa.int64()))
    parts = []
    for index, start in enumerate(range(0, table.num_rows, SHARD)):
        path = scratch.SCRATCH / f"part-{index:05d}.parquet"
        with pq.ParquetWriter(path, table.schema) as writer:
            for offset in range(start, min(start + SHARD, table.num_rows), BATCH):
                writer.write_table(table.slice(offset, min(BATCH, start + SHARD - offset)))
        parts.append(path)
    return parts


def encoded_again(parts: list[Path], output: Path) -> None:
    with pq.ParquetWriter(output, pq.read_schema(parts[0])) as writer:
        for path in parts:
            part = pq.ParquetFile(path)
            for group in range(part.num_row_groups):
                writer.write_table(part.read_row_group(group))
    digest = hashlib.sha256()
    with output.open("rb") as handle:
        while block := handle.read(1024 * 1024):
            digest.update(block)


def stitched(parts: list[Path], output: Path) -> None:
    with output.open("wb") as handle:
        stitch((path.open("rb") for path in parts), handle)


def timed(assemble, parts: list[Path], output: Path) -> float:
    began = time.perf_counter()
    assemble(parts, output)
    return time.perf_counter() - began


def spread(values: list[float], unit: str = "") -> str:
    return f"{statistics.median(values):.3f}{unit} (min {min(values):.3f}, max {max(values):.3f})"


def measure(rows: int, rounds: int) -> None:
    parts = make_parts(rows)
    output = scratch.SCRATCH / "output.parquet"
    size = sum(path.stat().st_size for path in parts)
    timed(stitched, parts, output)  # both warm: the parts in the page cache
    timed(encoded_again, parts, output)
    found = {"stitched": [], "encoded again": []}
    for number in range(rounds):
        for name in ("stitched", "encoded again") if number % 2 == 0 else ("encoded again", "stitched"):
            found[name].append(timed(stitched if name == "stitched" else encoded_again, parts, output))
        print(
            f"  round {number + 1}: stitched {found['stitched'][-1]:.3f} s, encoded again "
            f"{found['encoded again'][-1]:.3f} s",
            flush=True,
        )
    ratios = [again / stitch for stitch, again in zip(found["stitched"], found["encoded again"], strict=True)]
    print(f"{rows:,} records, {len(parts)} parts, {size / 1e6:.1f} MB:")
    for name, seconds in found.items():
        print(f"  {name:<14} median {spread(seconds, ' s')}; {size / 1e6 / statistics.median(seconds):,.0f} MB/s")
    print(f"  encoded again / stitched, paired: median {spread(ratios)}")
    for path in parts:
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="1000000,4000000", help="dataset sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    try:
        for rows in options.rows.split(","):
            measure(int(rows), options.rounds)
    finally:
        shutil.rmtree(scratch.SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
