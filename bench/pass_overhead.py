"""What the system costs on top of the work: clean-table over a generated 1,000,000-row CSV,
(a) as a bare loop over the processor's batch function, shard by shard as a slot reads and writes them,
(b) through the system (broker, gpuworker, shard claims, parts in storage, assembly) on 1 slot,
(c) the same on 2 slots; and (a2) two bare loops at once, each over half the shards: what the machine
gives two processes that do nothing but the work (c/a2 is then the system's own cost at K = 2).

    .venv/bin/python bench/pass_overhead.py [--rows N] [--rounds 5]

One run is one sample of a noisy machine, so the sides alternate in rounds and each round gives its
own paired ratios, b/a and c/(2a), over the hold (what the ledger meters) and over running →
succeeded (the hold plus assembly); the medians and spreads are printed, with the bare loop's own
spread and how long after its last shard each job's output was ready. Both sides are warm alike:
one gpuworker with two CPU slots runs a job on both slots before the first round, and the bare loop
runs in a process of its own, with a slot's threads and memory settings and started as a slot's pool
process is (scratch.as_a_slot_process), that has run the loop once. Beside the wall time, each round
puts the bare loop's CPU seconds against those of every process of the gpuworker while the job ran:
the system's own work, without the waits for a core (the CPU's own speed, which moves on this VM from
minute to minute, moves these too).
The bare loop reads and writes each of the job's shards as a slot does; a shard the system's slot ran
faster than the bare loop is counted, since then the bare loop is not the limit it stands for.
Staging is excluded and reported on its own. Embedded defaults, a scratch var/.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import scratch

scratch.as_a_worker()  # the bare loop runs with a slot's memory settings
scratch.setup()

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from django.core.management import call_command  # noqa: E402

from jobs import processors, services  # noqa: E402
from jobs.management.commands.gpuworker import slot_environment  # noqa: E402
from jobs.models import ENDED, Job, Shard, State  # noqa: E402
from jobs.outputs import RECORD_COLUMN, context_for, output_schema  # noqa: E402
from jobs.spec import Data, JobSpec, NamedFile, Request, Retention, Work  # noqa: E402
from jobs.staging.shards import batched, read_shard  # noqa: E402
from portal.models import Organisation  # noqa: E402

SLOTS = 2  # the gpuworker's CPU slots; a one-slot job runs on one of them


def bare_shards(job: Job, part: int = 0, parts: int = 1) -> tuple[dict[int, float], float]:
    """Seconds of each of the job's shards (those whose index is `part` modulo `parts`) through the
    batch function alone, read and written as jobs.workers.runner.process_shard does it, without the
    claims, leases and storage; and the CPU seconds of them all."""
    processor = processors.get(job.work)
    context = context_for(job)
    schema = output_schema(job)
    seconds = {}
    cpu = time.process_time()
    with tempfile.TemporaryDirectory(prefix="e31-bare-") as folder:
        for shard in job.shards.order_by("index"):
            if shard.index % parts != part:
                continue
            began = time.perf_counter()
            records, _ = read_shard(job, shard)
            with pq.ParquetWriter(os.path.join(folder, "part.parquet"), schema) as writer:
                for batch in batched(records, processor.batch_size):
                    result = processor.run_batch(batch, context)
                    kept = pa.array(result.kept, pa.int64())
                    writer.write_table(result.table.add_column(0, schema.field(RECORD_COLUMN), kept))
            seconds[shard.index] = time.perf_counter() - began
    return seconds, time.process_time() - cpu


def bare_process() -> None:
    """The bare loop's own process: per line on stdin a job id, and which of its shards to run (a part
    of so many: the shards whose index is that modulo so many); their seconds and CPU seconds as JSON on
    stdout."""
    scratch.as_a_slot_process()
    for line in sys.stdin:
        job, part, parts = (int(word) for word in line.split())
        seconds, cpu = bare_shards(Job.objects.get(pk=job), part, parts)
        print(json.dumps({"seconds": seconds, "cpu": cpu}), flush=True)


class Bare:
    """The bare loop in a process of its own, warmed by one run before it is measured, with the
    threads and memory settings of one of the gpuworker's slots."""

    def __init__(self, job: Job):
        env = {**os.environ, **slot_environment(max(1, (os.cpu_count() or 1) // SLOTS))}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--bare"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.run(job)

    def run(self, job: Job) -> dict[int, float]:
        self.start(job)
        return self.result()

    def start(self, job: Job, part: int = 0, parts: int = 1) -> None:
        self.process.stdin.write(f"{job.pk} {part} {parts}\n")
        self.process.stdin.flush()

    def result(self) -> dict[int, float]:
        """The seconds of each shard of the last run; its CPU seconds are kept in `cpu`."""
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError("the bare loop's process stopped")
        found = json.loads(answer)
        self.cpu = found["cpu"]
        return {int(index): seconds for index, seconds in found["seconds"].items()}

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(60)


def side_by_side(bares: list[Bare], job: Job) -> float:
    """Records per second of the bare loops run at once, each over its share of the job's shards: what
    the machine gives K processes that do nothing but the work."""
    began = time.perf_counter()
    for part, bare in enumerate(bares):
        bare.start(job, part, len(bares))
    for bare in bares:
        bare.result()
    return job.records_total / (time.perf_counter() - began)


def run_job(path: Path, organisation: Organisation, gpus: int, worker: int) -> tuple[Job, float, float, float, float]:
    """The job, its records/s over the hold (what is metered) and over running → succeeded, the
    seconds from its last shard's end to its output ready, and the CPU seconds every process of the
    gpuworker (`worker`'s pid) used from the job running to its end."""
    with path.open("rb") as data:
        # The staged copy is kept: the bare loop reads the job's own shards from it afterwards.
        spec = JobSpec(Work("clean-table"), Data(file=NamedFile(data, path.name)), Request(gpus, 1), Retention(1))
        job = services.submit_job(organisation, None, spec)
    before_running = (State.SUBMITTED, State.STAGING, State.QUEUED)
    while Job.objects.filter(pk=job.pk, state__in=before_running).exists():
        time.sleep(0.02)
    cpu = scratch.cpu_seconds(worker)
    # While the job holds the slots, this process looks rarely: on two cores every look is taken from
    # them. The hold's figures come from the ledger, so how often it looks moves none of them.
    while not Job.objects.filter(pk=job.pk, state__in=ENDED).exists():
        time.sleep(0.25)
    cpu = scratch.cpu_seconds(worker) - cpu
    job = scratch.wait_for_success(job)
    entry = job.ledger_entries.get(kind="hold")
    running = job.events.get(state=State.RUNNING).at
    succeeded = job.events.get(state=State.SUCCEEDED).at
    held = (entry.held_to - entry.held_from).total_seconds()
    last = max(job.shards.values_list("finished_at", flat=True))
    whole = (succeeded - running).total_seconds()
    return job, job.records_total / held, job.records_total / whole, (succeeded - last).total_seconds(), cpu


def in_slot(job: Job) -> dict[int, float]:
    """Seconds of each of the job's shards on its slot, claim to done."""
    done = Shard.objects.filter(job=job, status=Shard.Status.DONE)
    return {shard.index: (shard.finished_at - shard.started_at).total_seconds() for shard in done}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def measure(path: Path, organisation: Organisation, rounds: int, worker: int) -> None:
    warm, *_ = run_job(path, organisation, 2, worker)  # both slots have run a job
    print(f"staging: {warm.staging_seconds:.2f} s, {warm.input_bytes / 1e6 / warm.staging_seconds:.1f} MB/s")
    bare, beside = Bare(warm), Bare(warm)
    names = ("b/a hold", "c/(2a) hold", "b/a with assembly", "c/(2a) with assembly", "c/a2 hold", "CPU b", "CPU c")
    ratios = {name: [] for name in names}
    bare_rates, two_bare, ready, faster, shards = [], [], [], 0, 0
    # Where one slot's hold goes: its shards against the bare loop's, and the hold outside any shard.
    inside, outside = [], []
    try:
        for number in range(rounds):
            found = {}
            for side in ("bare", "a2", 1, 2) if number % 2 == 0 else (2, 1, "a2", "bare"):
                if side == "bare":
                    seconds = bare.run(warm)
                    found["bare"] = warm.records_total / sum(seconds.values())
                elif side == "a2":
                    found["a2"] = side_by_side([bare, beside], warm)
                else:
                    job, held, whole, after, cpu = run_job(path, organisation, side, worker)
                    found[side] = (job, held, whole, cpu)
                    ready.append(after)
            rate = found["bare"]
            bare_rates.append(rate)
            for slots in (1, 2):
                job, held_rate = found[slots][0], found[slots][1]
                seconds, bare_seconds = in_slot(job), bare.run(job)
                faster += sum(seconds[index] < bare_seconds[index] for index in seconds)
                shards += len(seconds)
                ratios[f"CPU {'bc'[slots - 1]}"].append(bare.cpu / found[slots][3])
                if slots == 1:
                    inside.append(sum(seconds.values()) / sum(bare_seconds.values()))
                    held = job.records_total / held_rate
                    outside.append((held - sum(seconds.values())) / held)
            ratios["b/a hold"].append(found[1][1] / rate)
            ratios["c/(2a) hold"].append(found[2][1] / (2 * rate))
            ratios["b/a with assembly"].append(found[1][2] / rate)
            ratios["c/(2a) with assembly"].append(found[2][2] / (2 * rate))
            ratios["c/a2 hold"].append(found[2][1] / found["a2"])
            two_bare.append(found["a2"] / rate)
            print(
                f"round {number + 1}: bare {rate:,.0f} records/s; "
                + "; ".join(f"{name} {values[-1]:.2f}" for name, values in ratios.items()),
                flush=True,
            )
    finally:
        bare.close()
        beside.close()
    middle = statistics.median(bare_rates)
    print(f"bare loop: median {middle:,.0f} records/s (min {min(bare_rates):,.0f}, max {max(bare_rates):,.0f})")
    for name, values in ratios.items():
        print(f"{name:<22} median {spread(values)}")
    print("(CPU b, CPU c: the bare loop's CPU seconds over the job's shards / those of every process of the gpuworker")
    print(" from the job running to its end, with 1 and 2 slots: the system's own work, without the waits for a core)")
    print(f"a2, two bare loops side by side, each over half the shards, / a: median {spread(two_bare)}")
    print(f"one slot's shards / the bare loop's, shard for shard: median {spread(inside)}")
    print(f"one slot's hold outside any shard (claims between shards, start, end): median {spread(outside)}")
    print(f"output ready after the last shard: median {spread(ready)} s")
    print(f"shards a slot ran faster than the bare loop: {faster} of {shards}")


def main() -> None:
    if sys.argv[1:] == ["--bare"]:
        bare_process()
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of bare loop, 1 slot and 2 slots")
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    organisation = Organisation.objects.create(name="Bench", slug="bench")
    with scratch.embedded_broker():
        path = scratch.make_csv(options.rows)
        print(f"dataset: {options.rows:,} rows, {path.stat().st_size / 1e6:.1f} MB, {os.cpu_count()} cores")
        worker = scratch.start_worker(SLOTS)
        try:
            measure(path, organisation, options.rounds, worker.pid)
        finally:
            scratch.stop_worker(worker)


if __name__ == "__main__":
    main()
