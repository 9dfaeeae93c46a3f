"""The e31 client's upload against `curl -T` of the same file to the same portal (issue 14's target:
at least 0.8 of curl's throughput), and the client's peak memory, which must not grow with the file.

    .venv/bin/python bench/api_upload.py [--gb 1] [--rounds 3] [--chunk-mib 32] [--server gunicorn|runserver]
    .venv/bin/python bench/api_upload.py --url URL --token TOKEN

Without --url it starts its own portal on loopback (gunicorn with two workers, as in production, or
Django's `runserver`) on a scratch var/ with a partner and an API token. Each round uploads the
generated file twice to /api/v1/uploads/, in alternating order: once with the client (in a process of
its own, so its peak RSS is its own: `e31.upload.upload_file`, its default chunks each with its
CRC-32) and once with curl as one tus PATCH of the whole file (`curl -T`, no checksum). The ratio is
the median of the rounds'.
"""

import argparse
import contextlib
import json
import logging
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import e31
from e31.upload import CHUNK_SIZE

ROOT = Path(__file__).resolve().parent.parent
MB = 1e6


def child(url: str, token: str, path: str, chunk_mib: int) -> None:
    """One upload with the client, in this process alone: its seconds and memory, as JSON on stdout."""
    from e31.upload import ResumeStore, upload_file

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with e31.Client(url, token) as portal:
        began = time.perf_counter()
        store = ResumeStore(Path(path).parent / "e31-state")
        done = upload_file(portal, Path(path), chunk_size=chunk_mib * 1024 * 1024, store=store)
        seconds = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "url": done.url, "rss_before_mb": before, "peak_rss_mb": peak}))


def make_file(path: Path, size: int) -> Path:
    block = os.urandom(1024 * 1024)
    with path.open("wb") as out:
        for _ in range(size // len(block)):
            out.write(block)
        out.write(block[: size % len(block)])
    return path


def ours(url: str, token: str, path: Path, chunk_mib: int) -> dict:
    argv = [sys.executable, __file__, "--child", url, token, str(path), str(chunk_mib)]
    answer = subprocess.run(argv, check=False, capture_output=True, text=True)
    if answer.returncode:
        raise RuntimeError(f"the client's upload failed: {answer.stderr.strip().splitlines()[-1:]}")
    return json.loads(answer.stdout)


def curl(url: str, token: str, path: Path) -> dict:
    """The whole file in one tus PATCH with `curl -T`. curl would append the file's name to an upload
    URL ending in '/', so the request line names the upload (--request-target) and the URL the host."""
    size = path.stat().st_size
    with e31.Client(url, token) as portal:
        upload = portal.create_upload(size, path.name)
        began = time.perf_counter()
        subprocess.run(
            [
                "curl", "--silent", "--show-error", "--fail", "--request", "PATCH", "--upload-file", str(path),
                "--request-target", upload.removeprefix(url), "--header", "Tus-Resumable: 1.0.0",
                "--header", "Content-Type: application/offset+octet-stream", "--header", "Upload-Offset: 0",
                "--header", f"Authorization: Bearer {token}", "--header", "Expect:", f"{url}/upload",
            ],
            check=True,
        )  # fmt: skip
        seconds = time.perf_counter() - began
        if portal.upload_offset(upload)["offset"] != size:
            raise RuntimeError("curl's PATCH did not reach the end of the upload")
    return {"seconds": seconds, "url": upload}


def discard(url: str, token: str, upload: str) -> None:
    with e31.Client(url, token) as portal:
        portal.delete_upload(upload)


def server_argv(server: str, port: int) -> list[str]:
    if server == "runserver":
        return [sys.executable, str(ROOT / "manage.py"), "runserver", "--noreload", f"127.0.0.1:{port}"]
    return [sys.executable, "-m", "gunicorn", "--workers", "2", "--bind", f"127.0.0.1:{port}", "portal.wsgi"]


def scratch_portal(stack: contextlib.ExitStack, server: str) -> tuple[str, str, subprocess.Popen]:
    """A portal on a scratch var/ with its embedded Redis (the API's rates are counted there), a partner
    in it and an API token of theirs; its URL, token, process."""
    sys.path.insert(0, str(ROOT / "bench"))
    import scratch

    scratch.setup()
    stack.enter_context(scratch.embedded_broker())
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from api.models import ApiToken
    from portal.models import Membership, Organisation

    call_command("migrate", verbosity=0)
    organisation = Organisation.objects.create(name="Bench", slug="bench")
    user = get_user_model().objects.create_user("bench")
    Membership.objects.create(user=user, organisation=organisation)
    _, token = ApiToken.objects.create(user=user, name="bench")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "E31_API_RATE": "100000/min", "E31_LOG_LEVEL": "WARNING"}
    with (scratch.SCRATCH / "portal.log").open("ab") as log:
        process = subprocess.Popen(
            server_argv(server, port),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the portal did not start") from None
            time.sleep(0.2)
    return f"http://127.0.0.1:{port}", token, process


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:5], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=1.0, help="size of the generated file, in GB")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each uploading with both")
    parser.add_argument("--chunk-mib", type=int, default=CHUNK_SIZE >> 20, help="the client's chunk size")
    parser.add_argument("--server", choices=("gunicorn", "runserver"), default="gunicorn", help="the portal's server")
    parser.add_argument("--url", help="an existing portal (default: one on a scratch var/)")
    parser.add_argument("--token", help="an API token of a partner on --url")
    options = parser.parse_args()
    with contextlib.ExitStack() as stack:
        measure(options, stack)


def measure(options: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    server = None
    if options.url:
        url, token = options.url.rstrip("/"), options.token
    else:
        url, token, server = scratch_portal(stack, options.server)
    folder = Path(os.environ.get("E31_BENCH_SCRATCH") or "/tmp")
    path = make_file(folder / "api-upload.bin", int(options.gb * 1e9))
    size = path.stat().st_size
    try:
        with e31.Client(url, token) as portal:
            portal.send("OPTIONS", portal.api_url("uploads/"), headers={"Tus-Resumable": "1.0.0"})
        print(
            f"{os.cpu_count()} cores; {size / MB:,.0f} MB to {url} ({'given' if options.url else options.server}), "
            f"client chunks {options.chunk_mib} MiB"
        )
        ratios, peaks = [], []
        for number in range(options.rounds):
            order = ("ours", "curl") if number % 2 == 0 else ("curl", "ours")
            speeds = {}
            for who in order:
                os.sync()  # the last upload's writes on disk first, so neither side starts behind them
                found = ours(url, token, path, options.chunk_mib) if who == "ours" else curl(url, token, path)
                speeds[who] = size / MB / found["seconds"]
                discard(url, token, found["url"])
                if who == "ours":
                    peaks.append((found["rss_before_mb"], found["peak_rss_mb"]))
            ratios.append(speeds["ours"] / speeds["curl"])
            print(
                f"round {number + 1}: e31 {speeds['ours']:,.1f} MB/s, curl -T {speeds['curl']:,.1f} MB/s, "
                f"ratio {ratios[-1]:.2f}",
                flush=True,
            )
        before, peak = max(peaks, key=lambda pair: pair[1])
        print(
            f"median ratio {statistics.median(ratios):.2f} over {options.rounds} rounds; the client's peak RSS "
            f"{peak:.0f} MB ({before:.0f} MB before the upload) for a {size / MB:,.0f} MB file"
        )
    except e31.APIError as error:
        sys.exit(f"{url}/api/v1/uploads/ answers {error.status}: {error}")
    finally:
        path.unlink()
        if server:
            server.terminate()
            server.wait()
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
