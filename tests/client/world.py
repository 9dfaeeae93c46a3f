"""The client's tests' world: the portal on loopback (`manage.py runserver` on the tests' database and
Redis) and its request log, the installed `e31` run as a partner runs it, a relay that drops a
connection midway, and a CSV grown to a size."""

import contextlib
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tests.support import EXAMPLE, manage, process_env, wait_for

# High enough that no test waits on a 429; the limits themselves are the server's tests.
RATES = {"E31_API_RATE": "100000/min", "E31_API_SUBMIT_RATE": "100000/hour"}


@dataclass
class Portal:
    """The portal the tests started: its URL, and its request log (one line per request, as runserver
    writes them: `"PATCH /api/v1/uploads/<id>/ HTTP/1.1" 204 0`)."""

    url: str
    log: Path

    def requests(self, method: str, path: str, after: int = 0, at_least: int = 0) -> list[str]:
        """The log's lines of requests `method path…` (a path prefix), from line `after` on, once there are
        `at_least` of them: the server writes a request's line after its answer, so a client that has its
        answer may read the log before the line is there."""
        pattern = re.compile(rf'"{method} {re.escape(path)}\S* HTTP/1\.1" (\d+)')

        def logged() -> list[str] | None:
            lines = [line for line in self.lines()[after:] if pattern.search(line)]
            return lines if len(lines) >= at_least else None

        return wait_for(logged, what=f"{at_least} {method} {path} lines in the portal's log") if at_least else logged()

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(url: str) -> bool:
    try:
        httpx.get(f"{url}/api/v1/schema/", timeout=2)
    except httpx.TransportError:
        return False
    return True


@contextlib.contextmanager
def running_portal(**env: str) -> Iterator[Portal]:
    """`manage.py runserver` on a free loopback port with the tests' settings and `env`, until it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = settings.VAR_DIR / f"portal-{port}.log"
    with log.open("ab") as output:
        process = subprocess.Popen(
            manage("runserver", f"127.0.0.1:{port}", "--noreload"),
            env=process_env(**env),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: process.poll() is not None or answers(url), timeout=60, what="the portal to answer")
        if process.poll() is not None:
            pytest.fail(f"runserver exited ({process.returncode}); its log: {log}")
        yield Portal(url, log)
    finally:
        process.terminate()
        process.wait(30)


@dataclass
class E31:
    """The installed `e31` command, run in `folder` with `env`."""

    folder: Path
    env: dict[str, str]

    def __call__(
        self, *args: str, timeout: float = 180, input: str = "", text: bool = True, **env: str
    ) -> subprocess.CompletedProcess:
        """Run it to its end; `text=False` gives stdout and stderr as the bytes written."""
        return subprocess.run(
            [sys.executable, "-m", "e31", *args],
            check=False,
            cwd=self.folder,
            env={**self.env, **env},
            capture_output=True,
            text=text,
            timeout=timeout,
            input=input if text else input.encode(),
        )

    def start(self, *args: str, **env: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "e31", *args],
            cwd=self.folder,
            env={**self.env, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )


def hang_up(*ends: socket.socket) -> None:
    for end in ends:
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()


class Relay:
    """A TCP relay on loopback to the portal: each connection it accepts is handed to `relay` with one of its
    own to the portal, until close()."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            self.relay(downstream)

    def portal(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.target_port))

    def relay(self, downstream: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()


class DroppingProxy(Relay):
    """A relay that cuts one connection, once, after `drop_after` bytes went from the client towards the portal:
    a network that drops in the middle of an upload. With `stall=True` it holds that connection instead,
    forwarding nothing more, until `release()` drops it: a network that hangs, so the client is in the middle of
    a chunk for as long as a test needs."""

    def __init__(self, target_port: int, drop_after: int, stall: bool = False):
        self.drop_after = drop_after
        self.forwarded = 0
        self.dropped = 0
        self.stall = stall
        self.released = threading.Event()
        self.lock = threading.Lock()
        super().__init__(target_port)

    def relay(self, downstream: socket.socket) -> None:
        upstream = self.portal()
        pair = (downstream, upstream)
        threading.Thread(target=self._pump, args=(downstream, upstream, pair, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(upstream, downstream, pair, False), daemon=True).start()

    def _cut_here(self, count: int) -> bool:
        with self.lock:
            self.forwarded += count
            if self.dropped or self.forwarded < self.drop_after:
                return False
            self.dropped += 1
            return True

    def _pump(self, source: socket.socket, sink: socket.socket, pair: tuple, towards_portal: bool) -> None:
        try:
            while data := source.recv(65536):
                if towards_portal and self._cut_here(len(data)):
                    if self.stall:
                        self.released.wait()
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            hang_up(*pair)

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.release()
        super().close()


def grown_csv(path: Path, size: int) -> Path:
    """examples/customers.csv's rows repeated under its header until the file has `size` bytes."""
    header, _, body = EXAMPLE.read_bytes().partition(b"\n")
    body = body if body.endswith(b"\n") else body + b"\n"
    with path.open("wb") as out:
        out.write(header + b"\n")
        while out.tell() < size:
            out.write(body)
    return path
