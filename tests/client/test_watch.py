"""`e31 watch`, `receipt` and `ledger` against the portal the tests start: a job followed to its
end, its output written as the job page serves it, and its bill as the ledger has it."""

from e31 import cli

from billing.models import LedgerEntry
from jobs.models import Job, State
from tests.support import client_for, job_form


def test_it_watches_a_job_to_its_end_and_prints_its_bill(e31, fleet, partner):
    page = client_for(partner)
    assert page.post("/jobs/new/", job_form()).status_code == 302
    job = Job.objects.get()
    watched = e31("watch", str(job.pk), "-o", "out")
    assert watched.returncode == 0, watched.stderr
    job.refresh_from_db()
    assert job.state == State.SUCCEEDED
    assert f"Job {job.pk}: succeeded" in watched.stderr
    for name in job.output_names:
        served = b"".join(page.get(f"/jobs/{job.pk}/output/{name}").streaming_content)
        assert (e31.folder / "out" / name).read_bytes() == served, name
    hold = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.HOLD)
    total = sum(entry.amount for entry in job.ledger_entries.all())
    assert f"= {cli.money(hold.amount, hold.currency)}" in watched.stdout, "as the pages write it"
    assert watched.stdout.splitlines()[-1] == f"Total: {cli.money(total, hold.currency)}"
    receipt = e31("receipt", str(job.pk))
    assert receipt.returncode == 0 and receipt.stdout and watched.stdout.endswith(receipt.stdout)
    exported = e31("ledger", "--csv", text=False)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == b"".join(page.get("/billing/ledger.csv").streaming_content)
    listed = e31("ledger")
    assert f"= {cli.money(hold.amount, hold.currency)}" in listed.stdout
    assert listed.stdout.splitlines()[-1] == f"Total: {cli.money(total, hold.currency)}"


def test_it_exits_non_zero_with_the_reason_when_the_job_fails(e31, fleet, partner):
    page = client_for(partner)
    assert page.post("/jobs/new/", job_form(b"id,text\n1,a\n", name="tiny.csv", sha256="0" * 64)).status_code == 302
    job = Job.objects.get()
    watched = e31("watch", str(job.pk))
    job.refresh_from_db()
    assert job.state == State.FAILED
    assert watched.returncode == 1 and watched.stdout == ""
    assert watched.stderr.splitlines()[-1] == f"e31: Job {job.pk} failed: {' '.join(job.error.split())}"
