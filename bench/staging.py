"""Staging against the plain tools, side by side in one run (issues 3 and 18):

1. a server path: staging MB/s against `cp` of the same file on the same disk and against sha256 of
   the file alone (target: staging >= 0.9 x the slower of the two);
2. an HTTP source on loopback: the same against `curl -o` of the same URL and sha256 alone;
   both in rounds, each round's ratio paired, with core-seconds per GB beside the wall time;
3. a resumable upload through the Django endpoint (runserver, as `make run` serves it), driven over
   loopback in 16 MiB chunks with SHA-256 checksums: MB/s, and the server's peak RSS (VmHWM), which
   must stay under 200 MB whatever the size;
4. CSV to shards: records/s of staging's read (count, check, infer types, cut shards) against
   `pyarrow.csv.read_csv` reading the same file alone (target >= 0.7).

    .venv/bin/python bench/staging.py [--gb 5] [--http-gb 2] [--repeat 3] [--upload-gb 1,4] [--rows 1000000]

Staging runs in this process through `jobs.staging.stage.stage`, the function the control worker
runs, on the embedded defaults in a scratch var/ of its own. Each staging figure is split into its
phases (download, copy into job storage, the read that counts and cuts).
"""

import argparse
import base64
import hashlib
import http.client
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import scratch

scratch.as_a_worker()
scratch.setup(
    E31_STAGING_ROOTS=str(scratch.SCRATCH / "roots"),
    E31_STAGING_ALLOWED_HOSTS="127.0.0.1",
)

import pyarrow.csv as pacsv  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.files.storage import default_storage  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from jobs import processors  # noqa: E402
from jobs.models import Job, State  # noqa: E402
from jobs.staging import scankernel, stage  # noqa: E402
from jobs.staging.describe import describe_and_cut  # noqa: E402
from jobs.staging.progress import StagingProgress  # noqa: E402
from portal.models import Membership, Organisation  # noqa: E402

ROOT, SCRATCH = scratch.ROOT, scratch.SCRATCH
MB = 1e6
CHUNK = 16 * 1024 * 1024


def grow(csv: Path, target_bytes: int, into: Path) -> Path:
    """The CSV's body repeated under its header until the file reaches target_bytes."""
    with csv.open("rb") as source:
        header = source.readline()
        body = source.read()
    into.parent.mkdir(parents=True, exist_ok=True)
    with into.open("wb") as out:
        out.write(header)
        written = len(header)
        while written < target_bytes:
            out.write(body)
            written += len(body)
    return into


class Phases:
    """The start of each staging phase, noted as StagingProgress announces it."""

    def __init__(self):
        self.marks: list[tuple[str, float]] = []
        original = StagingProgress.phase

        def noted(progress, name, total):
            self.marks.append((name, time.perf_counter()))
            return original(progress, name, total)

        StagingProgress.phase = noted

    def split(self, ended: float) -> dict[str, float]:
        ends = [mark[1] for mark in self.marks[1:]] + [ended]
        return {name: end - start for (name, start), end in zip(self.marks, ends, strict=True)}


def clean_table_job(organisation, **fields) -> Job:
    return Job.objects.create(
        organisation=organisation,
        work="clean-table",
        params=processors.get("clean-table").validate_params({}),
        gpus=2,
        hours=1,
        **fields,
    )


class Timed:
    """Wall seconds and core-seconds (this process's threads and the children it waited for) of a block."""

    def __enter__(self):
        self.wall, self.cores = time.perf_counter(), _core_seconds()
        return self

    def __exit__(self, *exc):
        self.wall, self.cores = time.perf_counter() - self.wall, _core_seconds() - self.cores


def _core_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_staging(organisation, phases: Phases, **source) -> tuple[Job, Timed, dict]:
    job = clean_table_job(organisation, **source)
    phases.marks.clear()
    with Timed() as timing:
        stage.stage(job.pk)
    ended = time.perf_counter()
    job.refresh_from_db()
    assert job.state == State.QUEUED, job.error
    return job, timing, phases.split(ended)


def timed(command: list[str]) -> Timed:
    with Timed() as timing:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return timing


def hash_alone(data: Path) -> Timed:
    """sha256 of the file and nothing else, as staging hashes it (hashlib, 1 MiB reads): the most any
    staging that checksums every byte can reach on this machine."""
    with Timed() as timing:
        digest = hashlib.sha256()
        with data.open("rb", buffering=0) as source:
            while chunk := source.read(1024 * 1024):
                digest.update(chunk)
    return timing


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def settle(cold: bool, left: Path | None = None) -> None:
    """Write what earlier runs left in memory to disk, then delete the copy `left` by the run before;
    with --cold, also drop the page cache, so the data is read from disk, as a dataset on a shared
    filesystem is the first time.

    The copy is deleted here, just before the next run, so that every run fills memory freed a moment
    ago: on this VM memory freed a few seconds earlier has gone back to the host, and filling it again
    costs about four times as much (cp of 3 GB: 2.5-3.2 GB/s right after a delete, 0.65-0.7 GB/s five
    seconds after), which favoured whichever of the two ran first after a delete."""
    os.sync()
    if left:
        left.unlink()
    if cold:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def side_by_side(
    label: str, baseline: str, command: list[str], data: Path, repeat: int, cold: bool, organisation, phases, **source
) -> None:
    """sha256 alone, the plain tool, then staging, `repeat` rounds in turn (this machine is noisy): each
    round's figures and its paired ratio to the faster of the two others (issue 18's target: >= 0.9),
    then the medians and spreads, the plain tool's own included, and core-seconds per GB of each. Each
    starts settled (untimed): else the one that runs second waits on the writeback of the first's copy."""
    sides = ("staging", baseline, "sha256")
    rates, cores, ratios = {name: [] for name in sides}, {name: [] for name in sides}, []
    baseline_copy = SCRATCH / "baseline-copy"
    # Untimed, each once: memory for the first run to fill, and staging's own (its chunks' heap) grown
    # as in a control worker that has staged before.
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    settle(cold, baseline_copy)
    job, _, _ = run_staging(organisation, phases, **source)
    left = Path(default_storage.path(job.staged_path))
    for number in range(repeat):
        settle(cold)
        hashed = hash_alone(data)
        settle(cold, left)
        plain = timed(command)
        settle(cold, baseline_copy)
        job, staged, split = run_staging(organisation, phases, **source)
        left = Path(default_storage.path(job.staged_path))
        size = job.input_bytes
        for name, run in zip(sides, (staged, plain, hashed), strict=True):
            rates[name].append(size / MB / run.wall)
            cores[name].append(run.cores / (size / 1e9))
        ratios.append(rates["staging"][-1] / min(rates[baseline][-1], rates["sha256"][-1]))
        print(
            f"{label}, {size / MB:,.0f} MB, round {number + 1}: "
            + ", ".join(f"{name} {rates[name][-1]:.1f} MB/s ({cores[name][-1]:.2f} core-s/GB)" for name in sides)
            + f"; staging / min({baseline}, sha256) {ratios[-1]:.2f}"
        )
        print("    phases: " + ", ".join(f"{name} {size / MB / s:.1f} MB/s ({s:.1f} s)" for name, s in split.items()))
    left.unlink()
    print(f"{label}: staging / min({baseline}, sha256 alone) median {spread(ratios)} over {repeat} rounds")
    for name in sides:
        print(f"    {name:<8} MB/s median {spread(rates[name])}; core-s per GB median {spread(cores[name])}")


def bench_server_path(organisation, phases: Phases, data: Path, repeat: int, cold: bool) -> None:
    command = ["cp", str(data), str(SCRATCH / "baseline-copy")]
    side_by_side(
        "server path", "cp", command, data, repeat, cold, organisation, phases,
        source_kind=Job.Source.PATH, source_uri=str(data), source_name=data.name,
    )  # fmt: skip


def bench_http(organisation, phases: Phases, data: Path, repeat: int, cold: bool) -> None:
    """The file served by Python's http.server in a process of its own, as a remote server would be."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(data.parent), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        url = f"http://127.0.0.1:{port}/{data.name}"
        command = ["curl", "-sS", "-o", str(SCRATCH / "baseline-copy"), url]
        side_by_side(
            "HTTP on loopback", "curl", command, data, repeat, cold, organisation, phases,
            source_kind=Job.Source.URL, source_uri=url, source_name=data.name,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait()


def wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def bench_upload(user, gigabytes: float) -> None:
    """One upload of `gigabytes` through a fresh runserver; MB/s and the server's peak RSS."""
    size = int(gigabytes * 1024**3)
    path = SCRATCH / "upload.bin"
    block = os.urandom(1024 * 1024)
    with path.open("wb") as out:
        for _ in range(size // len(block)):
            out.write(block)
    client = Client()
    client.force_login(user)
    session = client.cookies["sessionid"].value
    token = "a" * 32
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runserver", "--noreload", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        idle_rss = peak_rss_mb(server.pid)
        headers = {
            "Tus-Resumable": "1.0.0",
            "Cookie": f"sessionid={session}; csrftoken={token}",
            "X-CSRFToken": token,
        }
        connection = http.client.HTTPConnection("127.0.0.1", port)
        connection.request("POST", "/jobs/uploads/", headers={**headers, "Upload-Length": str(size)})
        response = connection.getresponse()
        answer = response.read()
        assert response.status == 201, (response.status, answer[:300])
        location = response.getheader("Location")
        began = time.perf_counter()
        with path.open("rb") as source:
            offset = 0
            while chunk := source.read(CHUNK):
                connection = http.client.HTTPConnection("127.0.0.1", port)
                connection.request(
                    "PATCH",
                    location,
                    body=chunk,
                    headers={
                        **headers,
                        "Content-Type": "application/offset+octet-stream",
                        "Upload-Offset": str(offset),
                        "Upload-Checksum": "sha256 " + base64.b64encode(hashlib.sha256(chunk).digest()).decode(),
                    },
                )
                response = connection.getresponse()
                response.read()
                assert response.status == 204, (response.status, offset)
                offset = int(response.getheader("Upload-Offset"))
        seconds = time.perf_counter() - began
        print(
            f"resumable upload, {size / MB:,.0f} MB in {CHUNK // 1024**2} MiB chunks: {size / MB / seconds:.1f} MB/s, "
            f"server peak RSS {peak_rss_mb(server.pid):.0f} MB (idle {idle_rss:.0f} MB)"
        )
    finally:
        server.terminate()
        server.wait()
        path.unlink()
        shutil.rmtree(SCRATCH / "var" / "uploads", ignore_errors=True)
        (SCRATCH / "var" / "uploads").mkdir()


def bench_csv(organisation, data: Path) -> None:
    job = clean_table_job(organisation, state=State.STAGING, source_name=data.name)
    with data.open("rb") as source:
        stored = default_storage.save("bench/rows.csv", source)
    began = time.perf_counter()
    _, _, total, shards = describe_and_cut(job, stored, StagingProgress(job.pk, job.staging_claim))
    ours = total / (time.perf_counter() - began)
    began = time.perf_counter()
    # The rows with a field missing are skipped, as staging's read leaves them to be rejected.
    parse = pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=lambda row: "skip")
    table = pacsv.read_csv(data, parse_options=parse)
    arrow = table.num_rows / (time.perf_counter() - began)
    print(
        f"CSV to shards, {total:,} records, {data.stat().st_size / MB:.0f} MB: staging's read {ours:,.0f} records/s "
        f"({len(shards)} shards), pyarrow.csv.read_csv {arrow:,.0f} records/s, ratio {ours / arrow:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=5.0, help="size of the server-path dataset")
    parser.add_argument("--upload-gb", default="1,4", help="sizes of the uploads, comma-separated")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the CSV-to-shards dataset")
    parser.add_argument("--http-gb", type=float, default=2.0, help="size of the HTTP dataset")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the server-path and HTTP comparisons")
    parser.add_argument("--cold", action="store_true", help="read the data from disk each run (root only)")
    parser.add_argument("--only", choices=["csv", "path", "http", "upload"], help="run one part only")
    options = parser.parse_args()
    scratch.as_a_pool_process()  # staging runs here as in the control worker's pool process
    call_command("migrate", verbosity=0)
    organisation = Organisation.objects.create(name="Bench", slug="bench")
    user = get_user_model().objects.create_user("bench")
    Membership.objects.create(user=user, organisation=organisation)
    phases = Phases()
    scankernel.warm()  # as the control worker does when it starts
    try:
        with scratch.embedded_broker():  # staging tells the scheduler when it is done
            print(f"{os.cpu_count()} cores; scratch {SCRATCH}")
            wanted = {options.only} if options.only else {"csv", "path", "http", "upload"}
            if wanted & {"csv", "path", "http"}:
                rows = scratch.make_csv(options.rows)
            if "csv" in wanted:
                bench_csv(organisation, rows)
            if "path" in wanted:
                big = grow(rows, int(options.gb * 1e9), SCRATCH / "roots" / organisation.slug / "server.csv")
                bench_server_path(organisation, phases, big, options.repeat, options.cold)
                big.unlink()
            if "http" in wanted:
                big = grow(rows, int(options.http_gb * 1e9), SCRATCH / "roots" / organisation.slug / "served.csv")
                bench_http(organisation, phases, big, options.repeat, options.cold)
            if "upload" in wanted:
                for gigabytes in options.upload_gb.split(","):
                    bench_upload(user, float(gigabytes))
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
