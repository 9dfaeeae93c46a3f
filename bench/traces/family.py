"""A family of generated traces for `bench/replay.py --suite` (issue 41): a queue policy is judged on all of
them, each against FIFO on the same trace, not on the one trace it was tuned on.

    .venv/bin/python bench/traces/family.py [--out DIR]    # writes them as CSVs, to look at

Each trace is drawn from its own seed, the same jobs every time, and made on the fly by the suite (nothing is
committed but this file). What varies between them: the share of jobs with a deadline (0, 0.25, 0.5, 1), their
slack (1.1 to 3 × the duration), the load (0.7, 0.9, 1.0: the work over what the GPUs can do in the span of the
arrivals), and the organisations (1 to 8, submitting unevenly: the heaviest's expected GPU-hours up to 20 × the
lightest's). What they share: jobs of 1 to 32 GPUs, most narrow, and durations heavy-tailed from minutes to
days (log-normal, a median of 20 minutes). Half are marked `tuning`: a policy is tuned on those and reported on
the `untouched` half as well.
"""

import argparse
import csv
import math
import random
from dataclasses import dataclass
from pathlib import Path

COLUMNS = ["job_id", "submit_time", "num_gpu", "duration", "ddl", "org"]
WIDTHS = {1: 0.50, 2: 0.15, 4: 0.13, 8: 0.12, 16: 0.06, 32: 0.04}
MEDIAN_SECONDS = 20 * 60
SIGMA = 1.8
SHORTEST, LONGEST = 2 * 60, 3 * 24 * 3600


@dataclass(frozen=True)
class Spec:
    name: str
    half: str  # "tuning" or "untouched"
    jobs: int
    gpus: int
    load: float
    deadline_share: float
    slack: tuple[float, float]
    orgs: int
    skew: float  # the heaviest organisation's share of the jobs over the lightest's
    seed: int


FAMILY = [
    Spec("none-light-one", "tuning", 200, 64, 0.7, 0.0, (1.1, 3.0), 1, 1, 4101),
    Spec("none-busy-skewed", "untouched", 200, 64, 0.9, 0.0, (1.1, 3.0), 4, 20, 4102),
    Spec("quarter-busy-two", "tuning", 200, 64, 0.9, 0.25, (1.2, 3.0), 2, 5, 4103),
    Spec("quarter-full-eight", "untouched", 200, 64, 1.0, 0.25, (1.2, 3.0), 8, 20, 4104),
    Spec("half-light-six", "tuning", 200, 128, 0.7, 0.5, (1.2, 3.0), 6, 10, 4105),
    Spec("half-busy-six-1400", "untouched", 1400, 128, 0.9, 0.5, (1.2, 3.0), 6, 20, 4106),
    Spec("half-full-three", "tuning", 200, 64, 1.0, 0.5, (1.1, 3.0), 3, 3, 4107),
    Spec("half-busy-tight", "untouched", 200, 64, 0.9, 0.5, (1.1, 1.5), 8, 20, 4108),
    Spec("all-light-two", "tuning", 200, 64, 0.7, 1.0, (1.1, 3.0), 2, 2, 4109),
    Spec("all-busy-four", "untouched", 200, 128, 0.9, 1.0, (1.2, 3.0), 4, 10, 4110),
    Spec("all-full-one", "tuning", 200, 64, 1.0, 1.0, (1.5, 3.0), 1, 1, 4111),
    Spec("quarter-light-eight", "untouched", 200, 128, 0.7, 0.25, (2.0, 3.0), 8, 20, 4112),
]


def jobs(spec: Spec) -> list[dict]:
    """The trace's jobs in arrival order, as rows of COLUMNS (seconds; `ddl` absolute, empty for none)."""
    draw = random.Random(spec.seed)
    # Organisation n submits skew^(-n / (orgs - 1)) as much as the first: the first over the last is `skew`.
    weights = [spec.skew ** (-n / max(1, spec.orgs - 1)) for n in range(spec.orgs)]
    rows = []
    for n in range(spec.jobs):
        gpus = min(spec.gpus, draw.choices(list(WIDTHS), weights=list(WIDTHS.values()))[0])
        duration = min(LONGEST, max(SHORTEST, round(draw.lognormvariate(math.log(MEDIAN_SECONDS), SIGMA))))
        org = draw.choices(range(spec.orgs), weights=weights)[0]
        rows.append({"job_id": f"{spec.name}-{n}", "num_gpu": gpus, "duration": duration, "org": f"o{org + 1}"})
    # Arrivals are a Poisson stream spread over the time the GPUs take to do all the work at the load.
    rate = spec.jobs / (sum(row["num_gpu"] * row["duration"] for row in rows) / (spec.gpus * spec.load))
    at = 0.0
    for row in rows:
        row["submit_time"] = round(at)
        slack = row["duration"] * draw.uniform(*spec.slack)
        row["ddl"] = round(row["submit_time"] + slack) if draw.random() < spec.deadline_share else ""
        at += draw.expovariate(rate)
    return rows


def write(spec: Spec, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{spec.name}.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(jobs(spec))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    for spec in FAMILY:
        path = write(spec, args.out)
        print(f"{path}: {spec.jobs} jobs for {spec.gpus} GPUs ({spec.half})")


if __name__ == "__main__":
    main()
