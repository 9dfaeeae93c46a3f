"""examples/generate.py: a help that prints, a path that must be given, an existing file kept unless forced."""

import hashlib
import subprocess
import sys

from tests.settings import ROOT
from tests.support import EXAMPLE

SCRIPT = ROOT / "examples" / "generate.py"


def generate(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, cwd=ROOT, timeout=60)


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_it_prints_its_help():
    done = generate("--help")
    assert done.returncode == 0, done.stderr
    assert "--rows" in done.stdout and "--force" in done.stdout


def test_it_refuses_to_run_without_a_path_and_leaves_the_example_as_it_was():
    before = digest(EXAMPLE)
    done = generate()
    assert done.returncode == 2
    assert "required: path" in done.stderr
    assert digest(EXAMPLE) == before


def test_it_keeps_an_existing_file_unless_forced(tmp_path):
    target = tmp_path / "mine.csv"
    target.write_text("precious\n")
    done = generate(str(target), "--rows", "3")
    assert done.returncode == 1
    assert done.stderr.strip() == f"{target} exists; give --force to write over it."
    assert target.read_text() == "precious\n"
    assert generate(str(target), "--rows", "3", "--force").returncode == 0
    assert len(target.read_text().splitlines()) == 4


def test_it_writes_the_committed_example_again(tmp_path):
    target = tmp_path / "customers.csv"
    done = generate(str(target))
    assert done.returncode == 0, done.stderr
    assert digest(target) == digest(EXAMPLE)


def test_it_says_why_a_bad_row_count_is_refused(tmp_path):
    for rows in ("-1", "²", "many"):
        done = generate(str(tmp_path / "x.csv"), "--rows", rows)
        assert done.returncode == 2 and "--rows" in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "x.csv").exists()
