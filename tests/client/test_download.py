"""`e31 download` against the portal the tests start: a partial file is resumed with an HTTP Range
(the portal answers 206 for the rest), and a file already whole is not fetched again."""

import pytest

from jobs.models import Job, State
from tests.support import client_for, job_form, wait_for_end


@pytest.fixture
def finished_job(fleet, partner) -> Job:
    """A clean-table job over examples/customers.csv, submitted on the job page and run to its end."""
    page = client_for(partner)
    assert page.post("/jobs/new/", job_form()).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    return job


def served(partner, job: Job) -> dict[str, bytes]:
    """The output files as the job page serves them."""
    page = client_for(partner)
    return {name: b"".join(page.get(f"/jobs/{job.pk}/output/{name}").streaming_content) for name in job.output_names}


def test_it_resumes_a_partial_file_with_a_range(e31, portal, partner, finished_job):
    job, files = finished_job, served(partner, finished_job)
    out = e31.folder / "out"
    out.mkdir()
    whole = files["output.parquet"]
    (out / "output.parquet.part").write_bytes(whole[: len(whole) // 2])
    mark = len(portal.lines())
    fetched = e31("download", str(job.pk), "-o", "out")
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout.split() == [f"out/{name}" for name in job.output_names]
    for name, content in files.items():
        assert (out / name).read_bytes() == content, name
    assert not (out / "output.parquet.part").exists()
    (ranged,) = portal.requests("GET", f"/api/v1/jobs/{job.pk}/output/output.parquet", after=mark, at_least=1)
    assert '" 206 ' in ranged
    mark = len(portal.lines())
    assert e31("download", str(job.pk), "-o", "out").returncode == 0
    assert portal.requests("GET", f"/api/v1/jobs/{job.pk}/output/output.parquet", after=mark) == []


def test_it_starts_a_damaged_partial_file_again(e31, partner, finished_job):
    job, files = finished_job, served(partner, finished_job)
    folder = e31.folder / f"job-{job.pk}"
    folder.mkdir()
    (folder / "output.parquet.part").write_bytes(b"\0" * (len(files["output.parquet"]) + 10))
    fetched = e31("download", str(job.pk))
    assert fetched.returncode == 0, fetched.stderr
    assert (folder / "output.parquet").read_bytes() == files["output.parquet"]
