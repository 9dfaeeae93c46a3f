"""`e31 download` against the portal the tests start: a partial file is resumed with an HTTP Range
(the portal answers 206 for the rest), and a file already whole is not fetched again."""

import shutil

from jobs.models import Job, State
from tests.support import EXAMPLE, client_for


def test_it_resumes_a_partial_file_with_a_range(e31, fleet, portal, partner):
    shutil.copy(EXAMPLE, e31.folder / "customers.csv")
    done = e31("submit", "customers.csv", "--work", "clean-table", "--gpus", "2", "--hours", "1", "--wait")
    assert done.returncode == 0, done.stderr
    job = Job.objects.get()
    assert job.state == State.SUCCEEDED
    page = client_for(partner)
    served = {name: b"".join(page.get(f"/jobs/{job.pk}/output/{name}").streaming_content) for name in job.output_names}
    whole = served["output.parquet"]
    out = e31.folder / "out"
    out.mkdir()
    (out / "output.parquet.part").write_bytes(whole[: len(whole) // 2])
    mark = len(portal.lines())
    fetched = e31("download", str(job.pk), "-o", "out")
    assert fetched.returncode == 0, fetched.stderr
    for name, content in served.items():
        assert (out / name).read_bytes() == content, name
    assert not (out / "output.parquet.part").exists()
    (ranged,) = portal.requests("GET", f"/api/v1/jobs/{job.pk}/output/output.parquet", after=mark)
    assert '" 206 ' in ranged
    mark = len(portal.lines())
    assert e31("download", str(job.pk), "-o", "out").returncode == 0
    assert portal.requests("GET", f"/api/v1/jobs/{job.pk}/output/output.parquet", after=mark) == []
