"""`e31 jobs`, `status` and `cancel` against the portal the tests start: the organisation's jobs
listed and filtered, one job's figures, a cancel, and the page's sentence when it can no longer be."""

import json
import re
import shutil

from tests.support import EXAMPLE


def test_it_lists_shows_and_cancels_a_job(e31, fleet):
    shutil.copy(EXAMPLE, e31.folder / "customers.csv")
    submitted = e31("submit", "customers.csv", "--work", "clean-table", "--gpus", "1", "--hours", "1")
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout)
    cancelled = e31("cancel", str(job_id))
    assert (cancelled.returncode, cancelled.stdout) == (0, f"Job {job_id}: cancelled\n"), cancelled.stderr
    again = e31("cancel", str(job_id))
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == f"e31: Job {job_id} is cancelled and can no longer be cancelled.\n"
    listed = e31("jobs")
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"^{job_id}\s+cancelled\s+clean-table\s+customers\.csv\s+1 × 1(\.00)? h", listed.stdout, re.M)
    assert str(job_id) not in e31("jobs", "--state", "running").stdout
    assert re.search(rf"^{job_id}\s", e31("jobs", "--state", "cancelled").stdout, re.M)
    shown = e31("status", str(job_id), "--json")
    assert json.loads(shown.stdout)["state"] == "cancelled"
    assert e31("status", str(job_id)).stdout.startswith(f"Job {job_id}: cancelled")


def test_it_says_not_found_for_a_job_it_cannot_see(e31, fleet):
    missing = e31("status", "999999")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith("e31: ") and missing.stderr.count("\n") == 1
