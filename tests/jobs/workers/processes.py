"""The processes a node runs, found by their command lines in /proc, for the workers' tests."""

from pathlib import Path


def processes_mentioning(text: str) -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in command:
            found[int(entry.name)] = command
    return found


def main_process_of(slot: str) -> int | None:
    """The slot's Celery main process: the oldest of the processes that name it (its pool is younger)."""
    pids = [pid for pid, command in processes_mentioning(slot).items() if "celery" in command]
    return min(pids) if pids else None
