"""Every GPU path once, for a GPU host lent for a few minutes (`make gpu-bench`, after `make gpu-deps`):
NVML discovery, torch's view of CUDA, each GPU work kind through the system against its bare loop
(bench/pass.py --gpu), and staging (bench/staging.py) with the host's cores. The figures go to one
file, by default bench-gpu.txt, each section with the command that made it.

    .venv/bin/python bench/gpu.py [--out FILE] [--texts N] [--images N] [--staging-gb G]

Without a GPU it runs the same on CPU slots, over fewer texts and images, and says so at the top of
the file, so the command is tried here before a host is lent.
"""

import argparse
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import scratch

scratch.setup()

from jobs.workers import nvml  # noqa: E402

BENCH = Path(__file__).resolve().parent


def device_report() -> tuple[str, bool]:
    """What this host has: its GPUs as NVML sees them, and CUDA as torch sees it; whether a GPU answered."""
    gpus = nvml.discover()
    lines = [f"host: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}"]
    lines += [
        f"GPU {g.index}: {g.name}, {g.memory_mb:,} MB, compute {g.compute_capability}, driver {g.driver}" for g in gpus
    ]
    try:
        import torch  # only where `make gpu-deps` installed it

        cuda = f"available, {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "not available"
        lines.append(f"torch {torch.__version__}: CUDA {cuda}")
    except ImportError:
        lines.append("torch is not installed: run `make gpu-deps` first")
    if not gpus:
        lines.append("NO GPU: NVML found none, so every figure below is on CPU slots, not a GPU's.")
    return "\n".join(lines), bool(gpus)


def section(out, title: str, argv: list[str], timeout: float) -> None:
    """Run one benchmark, its output into the file under the command that made it."""
    shown = " ".join(argv[1:])
    out.write(f"\n## {title}\n$ .venv/bin/python {shown}\n")
    out.flush()
    began = time.monotonic()
    own = {name: value for name, value in os.environ.items() if name not in ("E31_BENCH_SCRATCH", "E31_VAR_DIR")}
    # Each benchmark in a scratch folder and a session of its own: at its time limit its gpuworker stops with it.
    bench = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=BENCH.parent,
        env=own,
        start_new_session=True,
    )
    try:
        stdout, stderr = bench.communicate(timeout=timeout)
        out.write(stdout)
        if bench.returncode:
            out.write(f"(exit {bench.returncode})\n{stderr[-3000:]}\n")
    except subprocess.TimeoutExpired:
        os.killpg(bench.pid, signal.SIGINT)  # the benchmark stops its gpuworker, which stops its slots
        try:
            stdout, _ = bench.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(bench.pid, signal.SIGKILL)
            stdout, _ = bench.communicate()
        out.write(f"{stdout}(stopped after {timeout:.0f} s)\n")
    out.write(f"({time.monotonic() - began:.0f} s)\n")
    out.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench-gpu.txt", help="the file the figures go to")
    parser.add_argument("--texts", type=int, help="records of embed-text (50,000 with a GPU, 3,000 without)")
    parser.add_argument("--images", type=int, help="images of image-thumbs (5,000 with a GPU, 600 without)")
    parser.add_argument("--staging-gb", type=float, default=2.0, help="size of the server-path dataset staged")
    options = parser.parse_args()
    report, has_gpu = device_report()
    # On CPU slots the GPU's sizes would outlast the section's time limit and leave no figure at all.
    texts = options.texts or (50_000 if has_gpu else 3_000)
    images = options.images or (5_000 if has_gpu else 600)
    with open(options.out, "w", encoding="utf-8") as out:
        out.write(f"# GPU paths, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n{report}\n")
        out.flush()
        print(report, flush=True)
        python = sys.executable
        kinds = ["--kinds", "embed-text,image-thumbs", "--texts", str(texts), "--images", str(images)]
        kinds += ["--rounds", "1"]  # one round of each: a lent host's minutes are few
        section(
            out,
            "The pass: each GPU work kind, system vs bare loop",
            [python, "bench/pass.py", *(["--gpu"] if has_gpu else []), *kinds],
            300,
        )
        section(
            out,
            "Staging from a server path",
            [python, "bench/staging.py", "--only", "path", "--gb", str(options.staging_gb), "--repeat", "2"],
            180,
        )
    print(Path(options.out).read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
