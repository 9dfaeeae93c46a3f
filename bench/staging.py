"""Staging against the plain tools, side by side in one run (issues 3 and 18):

1. a server path: staging MB/s against `cp` of the same file on the same disk and against sha256 of
   the file alone (target: staging >= 0.9 x the slower of the two);
2. an HTTP source on loopback: the same against `curl -o` of the same URL and sha256 alone;
   both in rounds, each round's ratio paired, with core-seconds per GB beside the wall time;
3. a resumable upload through the Django endpoint (runserver, as `make run` serves it), driven over
   loopback in 16 MiB chunks with SHA-256 checksums: MB/s, and the server's peak RSS (VmHWM), which
   must stay under 200 MB whatever the size;
4. CSV to shards: records/s of staging's read (count, check, infer types, cut shards) against
   `pyarrow.csv.read_csv` reading the same file alone (target >= 0.7);
5. a gzip JSONL on a server path (issue 40): staging's copy of it (decompressed, hashed as sent,
   written) against `gzip -dc | sha256sum` (`pigz -dc` where it is installed), in rounds (target >= 0.9;
   --only gzip, --gzip-gb);
6. staging at the wire's speed (issue 40), from bench/ranged_server.py (ranges, sendfile) in a process of
   its own, each in rounds with its ratio paired (target >= 0.9 each): one file over HTTP (staging's
   ranged GETs over several connections) against `curl -o` and sha256 alone (--only ranges,
   --ranged-gb); the same file as an S3 object against boto3's own download into a file and sha256
   alone (--only s3); 16 files of 64 MB against `curl --parallel`, by this portal's fetch path (16
   fetches at once into one sink that hashes each part) and by staging them as one dataset of parts
   (--only parts, --parts, --part-mb); staging's peak RSS at two sizes, flat in the dataset's size
   (--only memory, --memory-gb).

    .venv/bin/python bench/staging.py [--gb 5] [--http-gb 2] [--repeat 3] [--upload-gb 1,4] [--rows 1000000]

Staging runs in this process through `jobs.staging.stage.stage`, the function the control worker
runs, on the embedded defaults in a scratch var/ of its own. Each staging figure is split into its
phases (download, copy into job storage, the read that counts and cuts).
"""

import argparse
import base64
import contextlib
import hashlib
import http.client
import json
import os
import queue
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
from jobs.staging import fetch, s3, scankernel, stage  # noqa: E402
from jobs.staging.describe import describe_and_cut  # noqa: E402
from jobs.staging.progress import StagingProgress  # noqa: E402
from jobs.staging.staged_copy import copy_to_job_storage  # noqa: E402
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


def timed(command: list[str] | Callable[[], object]) -> Timed:
    """A command's run, or a call's."""
    with Timed() as timing:
        if callable(command):
            command()
        else:
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
    label: str,
    baseline: str,
    command: list[str] | Callable[[], object],
    data: Path,
    repeat: int,
    cold: bool,
    organisation,
    phases,
    **source,
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
    timed(command)
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


@contextlib.contextmanager
def ranged_server(folder: Path) -> Iterator[str]:
    """bench/ranged_server.py serving `folder` in a process of its own; its base URL (an S3 endpoint too)."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "ranged_server.py"), str(folder), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


def bench_ranges(organisation, phases: Phases, data: Path, repeat: int, cold: bool) -> None:
    """One file from a server that takes ranges: staging fetches it in parts over several connections at once."""
    with ranged_server(data.parent.parent) as base:
        url = f"{base}/{data.parent.name}/{data.name}"
        command = ["curl", "-sS", "-o", str(SCRATCH / "baseline-copy"), url]
        side_by_side(
            "HTTP with ranges", "curl", command, data, repeat, cold, organisation, phases,
            source_kind=Job.Source.URL, source_uri=url, source_name=data.name,
        )  # fmt: skip
        ratios = []
        for number in range(repeat):
            (SCRATCH / "baseline-copy").unlink(missing_ok=True)
            settle(cold)
            hashed = hash_alone(data)
            settle(cold)
            plain = timed(command)
            settle(cold, SCRATCH / "baseline-copy")
            with Timed() as ours, HashedOnItsOwn() as sink:
                fetch.fetch(url, sink, max_bytes=data.stat().st_size, allowed_hosts=("127.0.0.1",))
            ratios.append(plain.wall / ours.wall if plain.wall > hashed.wall else hashed.wall / ours.wall)
            print(
                f"fetch alone, round {number + 1}: {data.stat().st_size / MB / ours.wall:.1f} MB/s "
                f"({ours.cores / (data.stat().st_size / 1e9):.2f} core-s/GB); / min(curl, sha256) {ratios[-1]:.2f}"
            )
        print(f"fetch alone (sha256 on a thread of its own): / min(curl, sha256 alone) median {spread(ratios)}")


class HashedOnItsOwn:
    """A sink that takes the fetch's buffers lent, as staging's body does, and hashes them on a thread of its
    own: the fetch path and its checksum, without the scan, the copy and the read after it."""

    def __enter__(self):
        self.chunks: queue.Queue = queue.Queue(16)
        self.thread = threading.Thread(target=self._hash)
        self.thread.start()
        return self

    def write_lent(self, data: memoryview, done) -> None:
        self.chunks.put((data, done))

    def _hash(self) -> None:
        digest = hashlib.sha256()
        while (chunk := self.chunks.get()) is not None:
            digest.update(chunk[0])
            chunk[1]()

    def __exit__(self, *exc):
        self.chunks.put(None)
        self.thread.join()


def bench_s3(organisation, phases: Phases, data: Path, repeat: int, cold: bool) -> None:
    """The same file as an S3 object (the ranged server answers S3's path-style GETs and HEADs): staging
    streams its ranged GETs into the copy; boto3's own download (s3transfer, ten connections) into a file is
    what staging did before it read the copy."""
    from boto3.s3.transfer import TransferConfig
    from django.conf import settings

    from jobs.staging import s3_reads

    credentials = {"access_key_id": "bench", "secret_access_key": "bench"}
    with ranged_server(data.parent.parent) as base:
        settings.E31_STAGING_S3_ENDPOINT_URL = base
        client = s3_reads.client(credentials)
        config = TransferConfig(max_concurrency=s3_reads.CONNECTIONS)  # as many as the client's pool holds
        download = lambda: client.download_file(  # noqa: E731
            data.parent.name, data.name, str(SCRATCH / "baseline-copy"), Config=config
        )
        side_by_side(
            "S3 with ranges", "boto3", download, data, repeat, cold, organisation, phases,
            source_kind=Job.Source.S3, source_uri=f"s3://{data.parent.name}/{data.name}", source_name=data.name,
            source_secret=s3.seal(credentials),
        )  # fmt: skip


class PartHashes:
    """One sink for parts fetched at once: each part's bytes hashed as they arrive, in its own order, as
    staging's parts are."""

    def __init__(self, count: int):
        self.parts = [hashlib.sha256() for _ in range(count)]

    def part(self, number: int):
        digest = self.parts[number]

        class Part:
            def write(self, data) -> int:
                digest.update(data)
                return len(data)

        return Part()


def bench_parts(organisation, phases: Phases, rows: Path, count: int, megabytes: int, repeat: int) -> None:
    """`count` files of `megabytes` MB from the ranged server: `curl --parallel` of them all into files,
    against this portal's fetch path (`count` fetches at once into one sink) and staging them as one dataset
    of parts (jobs.staging.parts), in rounds, each round's ratios against curl's."""
    folder = SCRATCH / "roots" / "parts"
    files = [grow(rows, megabytes * 1_000_000, folder / f"part-{number:05d}.csv") for number in range(count)]
    size = sum(file.stat().st_size for file in files)
    out = SCRATCH / "baseline-parts"
    out.mkdir(exist_ok=True)
    with ranged_server(SCRATCH / "roots") as base:
        urls = [f"{base}/parts/{file.name}" for file in files]
        command = ["curl", "-sS", "--no-progress-meter", "--parallel", "--parallel-max", str(count)]
        command += [argument for number, url in enumerate(urls) for argument in ("-o", str(out / str(number)), url)]

        def fetched() -> None:
            sink, failed = PartHashes(count), []

            def one(number: int) -> None:
                try:
                    fetch.fetch(urls[number], sink.part(number), max_bytes=size, allowed_hosts=("127.0.0.1",))
                except Exception as error:
                    failed.append(error)

            threads = [threading.Thread(target=one, args=(number,)) for number in range(count)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not failed, failed

        parts = {"source_kind": Job.Source.URL, "source_uri": urls[0], "source_name": files[0].name}
        parts["source_parts"] = [{"location": url} for url in urls]
        timed(command)  # untimed, each once
        fetched()
        job, _, _ = run_staging(organisation, phases, **parts)
        left = Path(default_storage.path(job.staged_path))
        rates = {"curl --parallel": [], "fetch": [], "staging": []}
        for number in range(repeat):
            settle(False, left)
            curl = timed(command)
            settle(False)
            ours = timed(fetched)
            settle(False)
            job, staged, _ = run_staging(organisation, phases, **parts)
            left = Path(default_storage.path(job.staged_path))
            for name, run in zip(rates, (curl, ours, staged), strict=True):
                rates[name].append(size / MB / run.wall)
            print(
                f"{count} parts of {megabytes} MB, round {number + 1}: "
                + ", ".join(f"{name} {values[-1]:.1f} MB/s" for name, values in rates.items())
                + f"; fetch / curl {rates['fetch'][-1] / rates['curl --parallel'][-1]:.2f}, staging / curl "
                f"{rates['staging'][-1] / rates['curl --parallel'][-1]:.2f}"
            )
        left.unlink()
    for name in ("fetch", "staging"):
        ratios = [ours / curl for ours, curl in zip(rates[name], rates["curl --parallel"], strict=True)]
        print(f"{count} parts: {name} / curl --parallel median {spread(ratios)} over {repeat} rounds")
    shutil.rmtree(folder)
    shutil.rmtree(out)


def bench_memory(organisation, phases: Phases, rows: Path, sizes: list[float]) -> None:
    """Staging's peak RSS (VmHWM, reset before each by /proc/self/clear_refs) from the ranged server, over
    HTTP and S3, at each size: flat in the dataset's size."""
    from django.conf import settings

    credentials = {"access_key_id": "bench", "secret_access_key": "bench"}
    with ranged_server(SCRATCH / "roots") as base:
        settings.E31_STAGING_S3_ENDPOINT_URL = base
        for gigabytes in sizes:
            data = grow(rows, int(gigabytes * 1e9), SCRATCH / "roots" / "memory" / "data.csv")
            for kind, location in (
                (Job.Source.URL, f"{base}/memory/data.csv"),
                (Job.Source.S3, "s3://memory/data.csv"),
            ):
                secret = s3.seal(credentials) if kind == Job.Source.S3 else ""
                before = rss_mb(os.getpid())
                Path("/proc/self/clear_refs").write_text("5\n")
                job, timing, _ = run_staging(
                    organisation, phases, source_kind=kind, source_uri=location, source_name="data.csv",
                    source_secret=secret,
                )  # fmt: skip
                peak = peak_rss_mb(os.getpid())
                Path(default_storage.path(job.staged_path)).unlink()
                size = job.input_bytes / MB
                print(
                    f"memory, {kind} with ranges, {size:,.0f} MB: staging's peak RSS {peak:.0f} MB, "
                    f"{peak - before:+.0f} MB over the {before:.0f} MB before ({size / timing.wall:.0f} MB/s)"
                )
            data.unlink()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


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


def make_jsonl(target_bytes: int, into: Path) -> Path:
    """JSONL records (an id, a name of six words, an amount, a tag) until the file reaches target_bytes."""
    chosen, words = random.Random(40), ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    with into.open("w") as out:
        done = 0
        while out.tell() < target_bytes:
            lines = []
            for number in range(done + 1, done + 10_001):
                name = " ".join(chosen.choices(words, k=6))
                amount = round(chosen.random() * 1000, 2)
                lines.append(json.dumps({"id": number, "name": name, "amount": amount, "tag": words[number % 8]}))
            out.write("\n".join(lines) + "\n")
            done += 10_000
    return into


def bench_gzip(organisation, gigabytes: float, repeat: int) -> None:
    """A gzip JSONL (`gzip -6`, one member) on a server path: staging's copy of it (`copy_to_job_storage`:
    read, decompressed, hashed as sent, written into job storage) against `gzip -dc | sha256sum`, in turn,
    each round's ratio paired. The copy is what a compressed source changes: the records are read after it
    (or behind it, streaming) as from any staged copy."""
    plain = make_jsonl(int(gigabytes * 1e9), SCRATCH / "rows.jsonl")
    packed = SCRATCH / "roots" / organisation.slug / "served.jsonl.gz"
    packed.parent.mkdir(parents=True, exist_ok=True)
    with plain.open("rb") as source, packed.open("wb") as out:
        subprocess.run(["gzip", "-6", "-c"], stdin=source, stdout=out, check=True)
    plain.unlink()
    decompress = "pigz -dc" if shutil.which("pigz") else "gzip -dc"
    command = ["bash", "-o", "pipefail", "-c", f"{decompress} {packed} | sha256sum"]
    job = clean_table_job(
        organisation, state=State.STAGING, staging_claim="bench", source_kind=Job.Source.PATH,
        source_uri=str(packed), source_name=packed.name,
    )  # fmt: skip

    def copied() -> tuple[Timed, int]:
        with Timed() as timing:
            path, size, sha256, _ = copy_to_job_storage(job, "bench/gzip.jsonl", StagingProgress(job.pk, "bench"))
        default_storage.delete(path)
        assert sha256 == hashlib.sha256(packed.read_bytes()).hexdigest(), "the SHA-256 of the bytes as sent"
        return timing, size

    timed(command)  # untimed, each once, as side_by_side does
    copied()
    ratios = []
    for number in range(repeat):
        settle(False)
        piped = timed(command)
        settle(False)
        copy, size = copied()
        ratio = piped.wall / copy.wall
        ratios.append(ratio)
        print(
            f"gzip JSONL, {packed.stat().st_size / MB:,.0f} MB sent, {size / MB:,.0f} MB uncompressed, round "
            f"{number + 1}: staging's copy {size / MB / copy.wall:.1f} MB/s ({copy.cores / (size / 1e9):.2f} "
            f"core-s/GB), `{decompress} | sha256sum` {size / MB / piped.wall:.1f} MB/s "
            f"({piped.cores / (size / 1e9):.2f} core-s/GB); copy / pipe {ratio:.2f}"
        )
    packed.unlink()
    print(f"gzip JSONL: staging's copy / `{decompress} | sha256sum` median {spread(ratios)} over {repeat} rounds")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=5.0, help="size of the server-path dataset")
    parser.add_argument("--upload-gb", default="1,4", help="sizes of the uploads, comma-separated")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the CSV-to-shards dataset")
    parser.add_argument("--http-gb", type=float, default=2.0, help="size of the HTTP dataset")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the server-path and HTTP comparisons")
    parser.add_argument("--cold", action="store_true", help="read the data from disk each run (root only)")
    parser.add_argument("--gzip-gb", type=float, default=1.0, help="uncompressed size of the gzip JSONL dataset")
    parser.add_argument("--ranged-gb", type=float, default=1.0, help="size of the ranged HTTP and S3 dataset")
    parser.add_argument("--parts", type=int, default=16, help="files of the dataset of parts")
    parser.add_argument("--part-mb", type=int, default=64, help="size of each of those files")
    parser.add_argument("--memory-gb", default="0.25,2", help="sizes staged for the peak RSS, comma-separated")
    kinds = ["csv", "path", "http", "upload", "gzip", "ranges", "s3", "parts", "memory"]
    parser.add_argument("--only", choices=kinds, help="run one part only")
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
            wanted = {options.only} if options.only else set(kinds)
            if wanted & {"csv", "path", "http", "ranges", "s3", "parts", "memory"}:
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
            if "gzip" in wanted:
                bench_gzip(organisation, options.gzip_gb, options.repeat)
            if wanted & {"ranges", "s3"}:
                big = grow(rows, int(options.ranged_gb * 1e9), SCRATCH / "roots" / organisation.slug / "ranged.csv")
                if "ranges" in wanted:
                    bench_ranges(organisation, phases, big, options.repeat, options.cold)
                if "s3" in wanted:
                    bench_s3(organisation, phases, big, options.repeat, options.cold)
                big.unlink()
            if "parts" in wanted:
                bench_parts(organisation, phases, rows, options.parts, options.part_mb, options.repeat)
            if "memory" in wanted:
                bench_memory(organisation, phases, rows, [float(size) for size in options.memory_gb.split(",")])
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
