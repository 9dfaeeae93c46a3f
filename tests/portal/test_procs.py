"""The supervisors' children (portal.procs): stopped by their signal, and killed with what they started when
they do not stop."""

import signal
import sys
from pathlib import Path

from jobs.workers.node import process_runs
from portal.procs import Children, StopRequested
from tests.support import wait_for

STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(f"{os.getpid()} {helper.pid}")
time.sleep(600)
"""

OBEDIENT = """
import os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(600)
"""


def test_children_that_ignore_their_stop_signal_are_killed_with_what_they_started(tmp_path):
    children = Children()
    marks = [tmp_path / f"child{n}" for n in range(3)]
    for n, mark in enumerate(marks):
        children.start(f"child{n}", [sys.executable, "-c", STUBBORN if n else OBEDIENT, str(mark)])
    wait_for(lambda: all(mark.exists() and mark.read_text() for mark in marks), timeout=60, what="the children")
    pids = [int(pid) for mark in marks for pid in Path(mark).read_text().split()]

    children.stop_all(timeout=1, together=True)

    obedient, *stubborn = children.children
    assert obedient.process.returncode == -signal.SIGTERM
    assert [child.process.returncode for child in stubborn] == [-signal.SIGKILL] * 2
    # Killed is not yet gone: the kernel ends a killed process a moment after the signal.
    wait_for(lambda: not any(process_runs(pid) for pid in pids), timeout=30, what="a child's own child to go with it")


def test_a_supervisors_sleep_ends_at_its_deadline_however_close_the_deadline_is():
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop = StopRequested()
        for _ in range(2000):
            stop.sleep(1e-7)  # the time left read once: a second read past the deadline would be negative
        assert not stop.requested
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
