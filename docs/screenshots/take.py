"""Take the screenshots in this folder again: the two journey tests (tests/portal/test_journeys_in_browser.py)
walk the partner's and the operator's day through a live server, a real gpuworker and Chromium, and shoot every
page they see at 1280 px, at 390 px and in dark mode (tests/screens.py); the charts' tests shoot a finished
job's charts and the fleet's, and the overview's test the operators' overview of the fleet and the queue. The
world the journeys walk is the tests' own: a fresh database whose ids start where a portal's that has run a
million jobs would (#1234567), the example dataset, jobs run on CPU slots.

    .venv/bin/python docs/screenshots/take.py

Needs Debian's chromium (apt install chromium) and the dev requirements (make test installs them). The PNGs
here are replaced: the ones the journeys no longer take are removed."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
JOURNEYS = "tests/portal/test_journeys_in_browser.py"
CHARTS = "tests/jobs/pages/test_charts_in_browser.py"  # the job page's and the fleet's charts, on seeded figures
OVERVIEW = "tests/jobs/pages/test_operator_overview_in_browser.py"  # the operators' overview, on a seeded fleet


def main() -> int:
    for stale in HERE.glob("*.png"):
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="e31-screenshots-") as scratch:
        env = {
            **os.environ,
            "E31_SCREENSHOTS": str(HERE),
            "E31_BROWSER_TESTS": "1",
            "E31_VAR_DIR": os.environ.get("E31_VAR_DIR", scratch),
        }
        pytest = [sys.executable, "-m", "pytest", JOURNEYS, CHARTS, OVERVIEW, "-q", "-p", "no:cacheprovider"]
        return subprocess.call(pytest, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
