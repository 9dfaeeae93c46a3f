"""The replay bench's traces (issue 31), generated with a seed: no public trace can be downloaded here.

    .venv/bin/python bench/traces/make_traces.py [--seed 31] [--out bench/traces]

Writes two CSVs that bench/replay.py reads (columns `job_id,submit_time,num_gpu,duration,ddl,org`;
seconds; `ddl` an absolute deadline, empty for none):

- philly_like.csv: 1,500 jobs shaped like Microsoft's Philly trace, for 64 GPUs at about 0.9 load. Most
  jobs take 1 GPU, fewer 2, 4 or 8; durations are heavy-tailed (log-normal, a median of 20 minutes, a
  few running a day); arrivals are a Poisson stream; about half the jobs have a deadline with 1.2 to 3
  times their duration of slack; four organisations submit unevenly, as Philly's virtual clusters did.
- two_orgs_flood.csv: organisation A floods 1,000 jobs of 1 to 4 GPUs and 5 to 30 minutes in its first
  minute; an hour later organisation B submits 10 jobs of 2 GPUs and 30 minutes. For 64 GPUs: A's
  work alone keeps them busy for about ten hours.
"""

import argparse
import csv
import math
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLUMNS = ["job_id", "submit_time", "num_gpu", "duration", "ddl", "org"]

PHILLY_JOBS = 1500
PHILLY_GPUS = 64
PHILLY_LOAD = 0.9
PHILLY_WIDTHS = {1: 0.70, 2: 0.12, 4: 0.10, 8: 0.08}
PHILLY_ORGS = {"vc1": 0.45, "vc2": 0.30, "vc3": 0.15, "vc4": 0.10}
MEDIAN_SECONDS = 20 * 60
SIGMA = 1.6
SHORTEST, LONGEST = 60, 24 * 3600


def philly_like(draw: random.Random) -> list[dict]:
    jobs = []
    for n in range(PHILLY_JOBS):
        gpus = draw.choices(list(PHILLY_WIDTHS), weights=list(PHILLY_WIDTHS.values()))[0]
        duration = min(LONGEST, max(SHORTEST, round(draw.lognormvariate(math.log(MEDIAN_SECONDS), SIGMA))))
        org = draw.choices(list(PHILLY_ORGS), weights=list(PHILLY_ORGS.values()))[0]
        jobs.append({"job_id": f"p{n}", "num_gpu": gpus, "duration": duration, "org": org})
    # The arrivals spread the work over as long as PHILLY_GPUS take to do it at PHILLY_LOAD.
    rate = PHILLY_JOBS / (sum(job["num_gpu"] * job["duration"] for job in jobs) / (PHILLY_GPUS * PHILLY_LOAD))
    at = 0.0
    for job in jobs:
        job["submit_time"] = round(at)
        slack = job["duration"] * draw.uniform(1.2, 3.0)
        job["ddl"] = round(job["submit_time"] + slack) if draw.random() < 0.5 else ""
        at += draw.expovariate(rate)
    return jobs


def two_orgs_flood(draw: random.Random) -> list[dict]:
    flood = [
        {
            "job_id": f"a{n}",
            "submit_time": round(draw.uniform(0, 60)),
            "num_gpu": draw.choice([1, 2, 4]),
            "duration": draw.randint(5 * 60, 30 * 60),
            "ddl": "",
            "org": "A",
        }
        for n in range(1000)
    ]
    later = [
        {"job_id": f"b{n}", "submit_time": 3600 + 6 * n, "num_gpu": 2, "duration": 30 * 60, "ddl": "", "org": "B"}
        for n in range(10)
    ]
    return sorted(flood + later, key=lambda job: job["submit_time"])


def write(path: Path, jobs: list[dict]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(jobs)
    print(f"{path}: {len(jobs)} jobs, {path.stat().st_size // 1024} KiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    write(args.out / "philly_like.csv", philly_like(random.Random(args.seed)))
    write(args.out / "two_orgs_flood.csv", two_orgs_flood(random.Random(args.seed + 1)))


if __name__ == "__main__":
    main()
