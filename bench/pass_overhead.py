"""What the system costs on top of the work: clean-table over a generated 1,000,000-row CSV,
(a) as a bare loop over the processor's batch function in one process,
(b) through the system (broker, gpuworker, shards, assembly) with 1 slot,
(c) the same with 2 slots.

    .venv/bin/python bench/pass_overhead.py [--rows N]

Staging is excluded from (b) and (c) (the pass is timed from the hold's start to the job's success)
and reported on its own. Runs on the embedded defaults in a scratch var/ of its own.
"""

import argparse
import io
import os
import time
from pathlib import Path

import scratch

scratch.as_a_worker()  # the bare loop runs with a slot's memory settings
scratch.setup()

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from django.core.management import call_command  # noqa: E402

from jobs import processors, services  # noqa: E402
from jobs.models import Job, State  # noqa: E402
from jobs.outputs import context_for, output_schema  # noqa: E402
from jobs.spec import Data, JobSpec, NamedFile, Request, Work  # noqa: E402
from jobs.staging.formats import iter_records, read_header  # noqa: E402
from jobs.staging.shards import batched  # noqa: E402
from portal.models import Organisation  # noqa: E402

ROOT, SCRATCH = scratch.ROOT, scratch.SCRATCH


def bare_loop(path: Path, job: Job) -> float:
    """Records per second of the batch function alone, reading and writing as a slot does."""
    processor = processors.get(job.work)
    context = context_for(job)
    with path.open("rb") as stream:
        _, data_offset, header_lines = read_header(stream, job.layout)
        stream.seek(data_offset)
        data = stream.read()
    began = time.perf_counter()
    records = iter_records(io.BytesIO(data), job.layout, start=data_offset, first_line=header_lines + 1)
    count = 0
    schema = output_schema(job)
    with pq.ParquetWriter(SCRATCH / "bare.parquet", schema) as writer:
        for batch in batched(records, processor.batch_size):
            result = processor.run_batch(batch, context)  # as the slot runs it
            kept = pa.array(result.kept, pa.int64())
            writer.write_table(result.table.add_column(0, schema.field("_record"), kept))
            count += len(batch)
    return count / (time.perf_counter() - began)


def run_job(path: Path, organisation: Organisation, gpus: int) -> tuple[Job, float, float]:
    """The job, its records/s over the hold (what is metered), and over running → succeeded."""
    with path.open("rb") as data:
        spec = JobSpec(Work("clean-table"), Data(file=NamedFile(data, path.name)), Request(gpus, 1))
        job = services.submit_job(organisation, None, spec)
    job = scratch.wait_for_success(job)
    entry = job.ledger_entries.get(kind="hold")
    running = job.events.get(state=State.RUNNING).at
    succeeded = job.events.get(state=State.SUCCEEDED).at
    held = (entry.held_to - entry.held_from).total_seconds()
    return job, job.records_total / held, job.records_total / (succeeded - running).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    rows = parser.parse_args().rows
    call_command("migrate", verbosity=0)
    organisation = Organisation.objects.create(name="Bench", slug="bench")
    with scratch.embedded_broker():
        path = scratch.make_csv(rows)
        print(f"dataset: {rows:,} rows, {path.stat().st_size / 1e6:.1f} MB, {os.cpu_count()} cores")
        held, whole = {}, {}
        for slots in (1, 2):
            worker = scratch.start_worker(slots)
            try:
                job, held[slots], whole[slots] = run_job(path, organisation, slots)
            finally:
                scratch.stop_worker(worker)
            print(
                f"staging ({slots} slot run): {job.staging_seconds:.2f} s, "
                f"{job.input_bytes / 1e6 / job.staging_seconds:.1f} MB/s, {job.shards.count()} shards"
            )
        bare = bare_loop(path, job)
        print(f"(a) bare loop, one process: {bare:,.0f} records/s")
        print("    records/s over the hold (metered), and over running → succeeded (with assembly):")
        for label, slots, limit, name in (("(b)", 1, bare, "b/a   "), ("(c)", 2, 2 * bare, "c/(2a)")):
            print(
                f"{label} system, {slots} slot(s): {held[slots]:>9,.0f} {name} = {held[slots] / limit:.2f}"
                f"   {whole[slots]:>9,.0f} {name} = {whole[slots] / limit:.2f}"
            )


if __name__ == "__main__":
    main()
