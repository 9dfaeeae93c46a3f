"""Child processes for the supervisors (`runportal`, `gpuworker`): started together, stopped together.

Each child runs in its own session so a Ctrl-C reaches only the supervisor, which then stops the
children in order; each child also gets a signal from the kernel if the supervisor dies (SIGTERM, or
the child's own `death_signal`), so no process is left behind either way.
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

PR_SET_PDEATHSIG = 1

# glibc's malloc hands a large buffer (a decoded image, a batch's tensors, a block's numpy arrays) back
# to the kernel when it is freed, and the next one costs a page fault per page: image-thumbs spent a
# quarter of its time there, staging's scan half. Workers keep up to 64 MiB of freed memory instead.
KEEP_FREED_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(64 * 1024**2), "MALLOC_TRIM_THRESHOLD_": str(128 * 1024**2)}


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Ask the kernel to send this process `signum` when its parent dies."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    stop_signal: int = signal.SIGTERM
    death_signal: int = signal.SIGTERM
    process: subprocess.Popen | None = None
    restarts: int = 0

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.argv, env=self.env, start_new_session=True, preexec_fn=lambda: die_with_parent(self.death_signal)
        )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill_leftovers(self) -> None:
        """After the child exited: kill what is left of its session (a worker's pool process whose main
        process was killed), so that a restart never runs beside it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


@dataclass
class Children:
    children: list[Child] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: list[str],
        env: dict | None = None,
        stop_signal: int = signal.SIGTERM,
        death_signal: int = signal.SIGTERM,
    ) -> Child:
        child = Child(name, argv, {**os.environ, **(env or {})}, stop_signal, death_signal)
        child.start()
        self.children.append(child)
        return child

    def stop_all(self, timeout: float = 15.0, together: bool = False) -> None:
        """Stop the children newest first, each before the next (workers before their Redis); or, `together`,
        all at once, for children that depend on none of the others. Whatever is left of a child's session
        after `timeout` (from its signal; together, from theirs) is killed."""
        deadline = time.monotonic() + timeout
        for child in self.children if together else ():
            if child.alive:
                child.process.send_signal(child.stop_signal)
        for child in reversed(self.children):
            if child.process is None:
                continue
            if child.alive and not together:
                child.process.send_signal(child.stop_signal)
                deadline = time.monotonic() + timeout
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(max(0.0, deadline - time.monotonic()))
            child.kill_leftovers()
            child.process.wait()


class StopRequested:
    """Turns SIGINT and SIGTERM into a flag the supervisor's loop reads."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGINT, self._set)
        signal.signal(signal.SIGTERM, self._set)

    def _set(self, signum, frame) -> None:
        self.requested = True

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.requested and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(0.2, left))  # read once: a second read could be past the deadline, and negative
