"""`e31 estimate` against the portal the tests start: a finished sample's estimate as a person reads it (what
the sample measured, then a row for each pass), the portal's JSON with --json, and a pass on more GPUs than
the fleet has refused in the words a pass on them is refused in."""

import json

from e31 import cli

from tests.factories import finished_sample


def test_it_shows_the_estimate_as_a_sentence_and_a_table(e31, organisation, online_slots, rate_card):
    sample = finished_sample(organisation)
    shown = e31("estimate", str(sample.pk), "--gpus", "2")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == (
        f"Sample {sample.pk} ran over 600 of 36,000 records on CPU slot 0 on fake-node in 60.0 s: "
        "10.0 records per second per slot; peak memory 120 MB."
    )
    assert lines[1].split() == ["PASS", "GPUS", "EXPECTED", "TIME", "GPU-HOURS", "EXPECTED", "COST", "ASK", "FOR"]
    answer = json.loads(e31("estimate", str(sample.pk), "--gpus", "2", "--json").stdout)
    rows = [("wide", answer["shapes"][0]), ("narrow", answer["shapes"][1]), ("--gpus 2", answer["estimate"])]
    assert len(lines) == 2 + len(rows)
    for line, (label, estimate) in zip(lines[2:], rows, strict=True):
        cost = cli.money(estimate["cost"], estimate["currency"])  # as the pages write it: 3.60 USD
        held = cli.hundredths(estimate["gpu_hours"])
        expected = [label, str(estimate["gpus"]), estimate["duration"], held, cost, estimate["hours"]]
        assert line.startswith(label) and " ".join(line.split()) == " ".join([*expected, "h"]), line
    assert answer["estimate"]["gpus"] == 2 and answer["shapes"][0]["gpus"] == 4
    planned = e31("estimate", str(sample.pk)).stdout.splitlines()[-1]
    assert planned.startswith("as sampled"), "without --gpus, the GPUs asked for with the sample"


def test_it_refuses_more_gpus_than_the_fleet_has_in_the_words_a_pass_is_refused_in(e31, organisation, online_slots):
    sample = finished_sample(organisation)
    refused = e31("estimate", str(sample.pk), "--gpus", "100")
    assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
    assert refused.stderr == "e31: The fleet has 4 CPU slots online; ask for 4 or fewer.\n"
    passed = e31("pass", str(sample.pk), "--gpus", "100", "--hours", "1")
    assert (passed.returncode, passed.stderr) == (1, refused.stderr), "one voice"
    assert e31("estimate", str(sample.pk), "--gpus", "4").returncode == 0
