"""bench/traces/family.py: the traces `bench/replay.py --suite` replays, drawn the same from their seeds."""

import importlib.util

from tests.settings import ROOT


def family():
    spec = importlib.util.spec_from_file_location("family", ROOT / "bench" / "traces" / "family.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_spans_what_issue_41_asks_for_in_two_halves():
    traces = family().FAMILY

    assert len(traces) >= 12
    assert len({spec.name for spec in traces}) == len({spec.seed for spec in traces}) == len(traces)
    assert sum(spec.half == "tuning" for spec in traces) == sum(spec.half == "untouched" for spec in traces)
    assert {spec.deadline_share for spec in traces} == {0.0, 0.25, 0.5, 1.0}
    assert {spec.load for spec in traces} == {0.7, 0.9, 1.0}
    assert min(spec.orgs for spec in traces) == 1 and max(spec.orgs for spec in traces) == 8
    assert max(spec.skew for spec in traces) == 20
    assert min(spec.slack[0] for spec in traces) == 1.1 and max(spec.slack[1] for spec in traces) == 3.0
    assert any(spec.jobs >= 1400 and spec.gpus == 128 for spec in traces)


def test_it_draws_the_same_jobs_from_a_seed():
    module = family()
    spec = module.FAMILY[3]

    first, again = module.jobs(spec), module.jobs(spec)

    assert first == again
    assert len(first) == spec.jobs
    assert [row["submit_time"] for row in first] == sorted(row["submit_time"] for row in first)
    assert {row["num_gpu"] for row in first} <= {1, 2, 4, 8, 16, 32}
    assert all(module.SHORTEST <= row["duration"] <= module.LONGEST for row in first)
    assert all(row["ddl"] == "" or row["ddl"] >= row["submit_time"] + row["duration"] for row in first)
    assert len({row["org"] for row in first}) == spec.orgs


def test_it_spreads_the_work_over_the_arrivals_at_the_traces_load():
    module = family()
    spec = module.FAMILY[0]

    rows = module.jobs(spec)

    work = sum(row["num_gpu"] * row["duration"] for row in rows)
    span = rows[-1]["submit_time"] - rows[0]["submit_time"]
    assert 0.8 * spec.load <= work / (spec.gpus * span) <= 1.25 * spec.load
