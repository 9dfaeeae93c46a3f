"""bench/replay.py: a small trace through the real scheduler in simulated time, figures worked out by hand."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.settings import ROOT

# On 4 GPUs, today's order: j1 holds 2 GPUs until 65 s (5 s of warm-up, then two rounds of 30 s shards);
# j2 wants all 4, so it and everything behind it wait while 2 sit idle; j4's deadline (50 s) comes
# while it waits, and it ends unheld; j2 runs from 65 s to 100 s, j3 from 100 s to 135 s.
TRACE = """job_id,submit_time,num_gpu,duration,ddl,org
j1,0,2,60,,a
j2,0,4,30,,a
j3,0,1,30,,b
j4,0,1,30,50,b
"""
FIELDS = {
    "deadlines_met", "deadline_jobs", "deadlines_told_infeasible", "deadlines_missed_how", "deadlines_missed_not_told",
    "jct_mean_h", "wait_mean_h", "wait_p95_h", "utilisation", "idle_share_while_waiting",
    "max_org_slowdown", "org_jct_mean_h", "finished", "succeeded", "jobs", "wall_s",
}  # fmt: skip


def replay(tmp_path, policy: str, *more: str, trace: str = TRACE, gpus: int = 4) -> dict:
    path = tmp_path / "trace.csv"
    path.write_text(trace)
    # Short: the scratch's embedded Redis listens on a unix socket under it, and such a path holds 107 bytes.
    scratch = Path(tempfile.mkdtemp(prefix=f"e31-{policy}-"))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "E31_BENCH_SCRATCH": str(scratch)}
    argv = [sys.executable, str(ROOT / "bench" / "replay.py"), "--trace", str(path), "--gpus", str(gpus)]
    done = subprocess.run(
        [*argv, "--policy", policy, *more], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def without_wall(figures: dict) -> dict:
    return {key: value for key, value in figures.items() if key != "wall_s"}


@pytest.mark.parametrize("path", ["batched", "--exact"])
def test_it_replays_todays_fifo_order_in_simulated_time(tmp_path, path):
    figures = replay(tmp_path, "fifo", *([path] if path == "--exact" else []))

    assert set(figures) == FIELDS
    assert figures["finished"] == figures["jobs"] == 4
    assert figures["succeeded"] == 3
    assert figures["deadlines_met"] == 0.0
    assert (figures["deadlines_told_infeasible"], figures["deadlines_missed_not_told"]) == (0, 1)  # FIFO tells none
    assert figures["deadlines_missed_how"] == {"never_held": 1}
    assert figures["jct_mean_h"] == round(100 / 3600, 4)  # j1, j2, j3 end at 65, 100 and 135 s
    assert figures["wait_mean_h"] == round((0 + 65 + 100 + 50) / 4 / 3600, 4)
    assert figures["wait_p95_h"] == round(100 / 3600, 4)
    assert figures["utilisation"] == 0.5  # 270 slot-seconds of shards, of 4 slots for 135 s
    assert figures["idle_share_while_waiting"] == round(2 * 65 / (4 * 135), 4)
    assert figures["max_org_slowdown"] == round((135 / 30 + 50 / 30) / 2, 4)  # b: j3 and j4


def test_it_replays_every_job_to_its_end_with_the_default_policy(tmp_path):
    figures = replay(tmp_path, "default")

    assert set(figures) == FIELDS
    assert figures["finished"] == figures["jobs"] == 4
    # j4 is told at submit that its deadline cannot be met: by the requests (72 s each), the slots a pass asks back
    # first are j2's, the last in the order, half its 72 s shard away, and j4's 72 s asked end past 50 s. It meets
    # it as best effort: 5 s of warm-up and its 30 s shard end at 40 s.
    assert figures["deadlines_met"] == 1.0
    assert (figures["deadlines_told_infeasible"], figures["deadlines_missed_not_told"]) == (1, 0)
    assert 0 < figures["utilisation"] <= 1
    assert 0 <= figures["idle_share_while_waiting"] <= 1


# Six jobs on 8 GPUs: flexible ones that widen onto idle slots and give them back to the jobs that arrive
# later (asked back at a shard boundary), deadline jobs the first round keeps on time, and one (j6) whose
# request is drawn close to its work, so its time limit may cut it.
BUSY = """job_id,submit_time,num_gpu,duration,ddl,org
j1,0,1,1800,,a
j2,0,2,900,,a
j3,60,4,600,1500,b
j4,120,2,1200,,b
j5,300,8,300,,a
j6,400,1,3000,6000,b
"""


def test_it_gives_the_same_figures_with_a_slots_claims_batched_as_claimed_one_by_one(tmp_path):
    batched = replay(tmp_path, "default", trace=BUSY, gpus=8)
    exact = replay(tmp_path, "default", "--exact", trace=BUSY, gpus=8)

    assert batched["finished"] == batched["jobs"] == 6
    assert without_wall(batched) == without_wall(exact)
