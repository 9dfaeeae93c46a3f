"""`e31 submit`, end to end against the portal the tests start and a real gpuworker: a file uploaded,
the job followed to its end, its output written as the job page serves it, and its bill printed; a
value the portal refuses said in its own sentence, a line for each, and before any byte is uploaded when
the portal's dry run of the job refuses it."""

import shutil

from e31 import cli

from billing.models import LedgerEntry
from jobs.models import Job, State
from tests.datasets import linear_model
from tests.support import EXAMPLE, client_for, wait_for_end

SUBMIT = ("submit", "customers.csv", "--work", "clean-table", "--hours", "1")


def served(partner, job: Job, name: str) -> bytes:
    response = client_for(partner).get(f"/jobs/{job.pk}/output/{name}")
    assert response.status_code == 200
    return b"".join(response.streaming_content)


def test_it_uploads_waits_and_writes_the_output_the_job_page_serves(e31, fleet, partner):
    shutil.copy(EXAMPLE, e31.folder / "customers.csv")
    done = e31(*SUBMIT, "--gpus", "2", "--param", "type_threshold=0.99", "--wait", "-o", "out")
    assert done.returncode == 0, done.stderr
    job = Job.objects.get()
    assert (job.state, job.gpus, job.created_by, job.params["type_threshold"]) == (State.SUCCEEDED, 2, partner, 0.99)
    assert f"Job {job.pk} submitted: 2 × 1 h of clean-table over customers.csv" in done.stderr
    assert f"Job {job.pk}: succeeded" in done.stderr
    written = sorted(path.name for path in (e31.folder / "out").iterdir())
    assert written == sorted(job.output_names) and "manifest.json" in written
    for name in job.output_names:
        assert (e31.folder / "out" / name).read_bytes() == served(partner, job, name), name
    hold = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.HOLD)
    assert f"= {cli.money(hold.amount, hold.currency)}" in done.stdout, "as the pages write it"
    total = sum(entry.amount for entry in job.ledger_entries.all())
    assert done.stdout.strip().splitlines()[-1] == f"Total: {cli.money(total, hold.currency)}"


def test_it_says_the_portals_sentence_for_a_refused_value_and_keeps_the_upload(e31, fleet, portal):
    shutil.copy(EXAMPLE, e31.folder / "customers.csv")
    mark = len(portal.lines())
    refused = e31(*SUBMIT, "--gpus", "0", "--keep-days", "500")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == "e31: Ask for at least one GPU, not 0.\ne31: Keep the staged copy 0 to 90 days, not 500.\n"
    assert portal.requests("POST", "/api/v1/uploads/", after=mark) == [], "refused by the dry run: nothing uploaded"
    (e31.folder / "scorer.onnx").write_bytes(linear_model())
    late = e31(*SUBMIT, "--gpus", "1", "--model", "scorer.onnx")  # found when the job is made, past the uploads
    assert (late.returncode, late.stderr.splitlines()[-1]) == (1, "e31: clean-table takes no model file.")
    assert not Job.objects.exists()
    mark = len(portal.lines())
    accepted = e31(*SUBMIT, "--gpus", "1")
    assert accepted.returncode == 0, accepted.stderr
    assert portal.requests("PATCH", "/api/v1/uploads/", after=mark) == [], "the finished upload is used again"
    assert "Using the earlier upload of customers.csv" in accepted.stderr
    job = Job.objects.get(pk=int(accepted.stdout))
    assert job.gpus == 1
    wait_for_end(job)  # before the next test: its fleet is free again


def test_it_refuses_an_unknown_work_kind_or_parameter_before_it_uploads_anything(e31, online_slots, portal):
    shutil.copy(EXAMPLE, e31.folder / "customers.csv")
    mark = len(portal.lines())
    typo = e31("submit", "customers.csv", "--work", "clean-tabel", "--gpus", "1", "--hours", "1")
    assert (typo.returncode, typo.stdout) == (1, "")
    assert typo.stderr.startswith("e31: There is no work kind 'clean-tabel'; the kinds are: classify, clean-table, ")
    param = e31(*SUBMIT, "--param", "treshold=1", "--gpus", "1")
    assert param.stderr.startswith("e31: clean-table has no parameter 'treshold' (it takes: ")
    assert portal.requests("POST", "/api/v1/uploads/", after=mark) == [], "no upload begun"
    assert not Job.objects.exists()


def test_it_sends_data_given_again_as_the_parts_of_one_dataset(e31, online_slots, portal):
    """DATA and --data, then --data alone: the parts in the order given, nothing uploaded."""
    mark = len(portal.lines())
    parts = ["http://localhost/part-0.csv", "http://localhost/part-1.csv", "http://localhost/part-2.csv"]
    made = e31(
        "submit",
        parts[0],
        "--data",
        parts[1],
        "--data",
        parts[2],
        "--work",
        "clean-table",
        "--gpus",
        "1",
        "--hours",
        "1",
    )
    assert made.returncode == 0, made.stderr
    job = Job.objects.get(pk=int(made.stdout))
    assert [part["location"] for part in job.source_parts] == parts
    assert f"Job {job.pk} submitted: 1 × 1 h of clean-table over part-0.csv" in made.stderr
    assert portal.requests("POST", "/api/v1/uploads/", after=mark) == [], "locations: nothing uploaded"
    again = e31(
        "submit", "--data", parts[1], "--data", parts[0], "--work", "clean-table", "--gpus", "1", "--hours", "1"
    )
    assert again.returncode == 0, again.stderr
    assert [part["location"] for part in Job.objects.get(pk=int(again.stdout)).source_parts] == [parts[1], parts[0]]


def test_it_says_the_portals_sentence_for_a_part_refused(e31, online_slots):
    """The same part twice; no data at all."""
    twice = e31(
        "submit", "--data", "http://localhost/a.csv", "--data", "http://localhost/a.csv", *SUBMIT[2:], "--gpus", "1"
    )
    assert (twice.returncode, twice.stderr) == (
        1,
        "e31: Part 2 (http://localhost/a.csv) is part 1 again: give each part once.\n",
    )
    none = e31("submit", *SUBMIT[2:], "--gpus", "1")
    assert (none.returncode, none.stderr) == (
        1,
        "e31: Give the data: DATA, or --data once for each part of a dataset.\n",
    )
    assert not Job.objects.exists()
