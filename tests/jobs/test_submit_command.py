"""`manage.py submit`: the same job from a terminal, through the broker and the workers."""

import json
import shutil
import subprocess

import pyarrow.parquet as pq
import pytest
from django.conf import settings

from billing.models import LedgerEntry
from jobs.models import Job, State
from tests.support import EXAMPLE, manage, process_env

HOLD = LedgerEntry.Kind.HOLD

pytestmark = pytest.mark.django_db(transaction=True)


def submit(*args: str) -> subprocess.CompletedProcess:
    command = manage("submit", *args)
    return subprocess.run(command, check=False, env=process_env(), capture_output=True, text=True, timeout=120)


def test_it_runs_a_job_and_writes_the_output_and_the_ledger_line(fleet, organisation, partner, tmp_path):
    result = submit(
        "--org", "partner-lab", "--as", "partner", "--data", str(EXAMPLE), "--work", "clean-table",
        "--gpus", "2", "--hours", "0.5", "--param", "type_threshold=0.99", "--wait", "--output", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = Job.objects.get()
    assert job.state == State.SUCCEEDED
    assert job.created_by == partner, "the job is the partner's: its receipt and email name them"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "output.parquet", "rejects.csv"]
    assert pq.read_table(tmp_path / "output.parquet").num_rows == job.records_out
    line = json.loads(result.stdout.strip().splitlines()[-1])
    entry = LedgerEntry.objects.get(job=job, kind=HOLD)
    assert line["job"] == job.pk
    assert (line["gpus"], line["seconds"], line["gpu_hours"]) == (2, entry.seconds, str(entry.gpu_hours))
    assert "100%" in result.stderr
    submitted = f"Job {job.pk} submitted: 2 × 0.5 h (flexible, up to 2 at once) of clean-table over customers.csv"
    assert submitted in result.stderr
    assert "Expected to finish by " in result.stderr


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--org", "nobody"], "There is no organisation 'nobody'."),
        (["--as", "nobody"], "There is no user 'nobody'."),
        (["--as", "outsider"], "outsider is not a member of partner-lab: submit --as one of its members."),
        (["--as", "operator"], "operator is not a member of partner-lab: submit --as one of its members."),
        (["--gpus", "0"], "Refused: Ask for at least one GPU, not 0."),
        (["--gpus", "many"], "Refused: GPUs must be a whole number, not 'many'."),
        (["--gpus", "3"], "Refused: The fleet has 2 CPU slots online; ask for 2 or fewer."),
        (["--hours", "-1"], "Refused: Hours must be more than zero, not -1."),
        (["--work", "mine-bitcoin"], "Refused: There is no work kind 'mine-bitcoin'"),
        (["--param", "speed=fast"], "Refused: clean-table has no parameter 'speed'"),
        (["--data", "/no/such/file.csv"], "There is no file /no/such/file.csv."),
        (["--data", "s3://bucket/data.csv"], "Refused: Give credentials that can read s3://bucket/"),
        (["--data", "http://127.0.0.1/data.csv"], "Refused: "),
        (["--data", "https://data.example/\u202evsc.csv"], "Refused: The location contains U+202E RIGHT-TO-LEFT"),
        (["--data", "https://data.example/a\nb.csv"], "Refused: The location contains U+000A, an invisible or"),
        (["--keep-output-days", "0"], "Refused: Keep the output 1 to 365 days, not 0."),
        (["--deadline", "soon"], "Refused: A deadline is a date and time such as 2026-12-01T18:00 (UTC unless"),
        (["--deadline", "2001-01-01T02:00+02:00"], "Refused: The deadline, 2001-01-01 00:00 UTC, has passed"),
    ],
)
def test_it_refuses_with_a_one_line_reason(fleet, organisation, partner, outsider, operator, args, reason):
    base = {
        "--org": "partner-lab",
        "--as": "partner",
        "--data": str(EXAMPLE),
        "--work": "clean-table",
        "--gpus": "1",
        "--hours": "1",
    }
    extra = []
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in base:
            base[flag] = value
        else:
            extra += [flag, value]
    result = submit(*[item for pair in base.items() for item in pair], *extra)
    assert result.returncode != 0
    assert reason in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not Job.objects.exists()


def test_it_names_the_partner_a_job_is_submitted_as(fleet, organisation, partner):
    result = submit(
        "--org", "partner-lab", "--data", str(EXAMPLE), "--work", "clean-table", "--gpus", "1", "--hours", "1"
    )
    assert result.returncode != 0
    assert "the following arguments are required: --as" in result.stderr
    by_email = submit(
        "--org", "partner-lab", "--as", "PARTNER@example.com", "--data", str(EXAMPLE), "--work", "clean-table",
        "--gpus", "1", "--hours", "1",
    )  # fmt: skip
    assert by_email.returncode == 0, by_email.stderr
    assert Job.objects.get().created_by == partner


def test_it_refuses_a_binary_file(fleet, organisation, partner, tmp_path):
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 10)
    result = submit(
        "--org",
        "partner-lab",
        "--as",
        "partner",
        "--data",
        str(binary),
        "--work",
        "clean-table",
        "--gpus",
        "1",
        "--hours",
        "1",
    )
    assert result.returncode != 0
    assert "This is a binary file, not CSV or JSONL text." in result.stderr


@pytest.fixture
def staging_folder():
    """The partner organisation's own folder under the staging root, which the worker reads too."""
    folder = settings.E31_STAGING_ROOTS[0] / "partner-lab"
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    shutil.rmtree(settings.E31_STAGING_ROOTS[0])


def test_it_takes_data_given_again_as_the_parts_of_one_dataset(fleet, organisation, partner, staging_folder):
    """Two server paths, the second a JSONL part of a JSONL dataset, joined in the order given."""
    first, second = staging_folder / "a.jsonl", staging_folder / "b.jsonl"
    first.write_bytes(b"".join(b'{"id": %d, "text": "row"}\n' % n for n in range(40)))
    second.write_bytes(b"".join(b'{"id": %d, "text": "row"}\n' % n for n in range(40, 100)))
    result = submit(
        "--org", "partner-lab", "--as", "partner", "--data", str(first), "--data", str(second),
        "--work", "clean-table", "--gpus", "1", "--hours", "1", "--wait",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = Job.objects.get()
    assert job.state == State.SUCCEEDED and job.records_out == 100
    assert [part["location"] for part in job.parts_shown] == [str(first), str(second)]
    assert [part["bytes"] for part in job.parts_shown] == [first.stat().st_size, second.stat().st_size]


@pytest.mark.parametrize(
    ("parts", "reason"),
    [
        (["a.csv", "a.csv"], "Refused: Part 2 ({root}/a.csv) is part 1 again: give each part once."),
        (
            ["a.csv", "http://localhost/b.csv"],
            "Refused: Part 2 (http://localhost/b.csv) is a URL and part 1 is a server",
        ),
        (["a.csv", "/etc/passwd"], "Refused: Part 2 (/etc/passwd): /etc/passwd is not a readable file in your staging"),
    ],
)
def test_it_refuses_parts_naming_the_part_in_one_line(fleet, organisation, partner, staging_folder, parts, reason):
    (staging_folder / "a.csv").write_bytes(b"id,text\n1,a\n")
    given = [item for part in parts for item in ("--data", part if "/" in part else str(staging_folder / part))]
    result = submit(
        "--org", "partner-lab", "--as", "partner", *given, "--work", "clean-table", "--gpus", "1", "--hours", "1"
    )
    assert result.returncode != 0
    assert reason.format(root=staging_folder) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not Job.objects.exists()
