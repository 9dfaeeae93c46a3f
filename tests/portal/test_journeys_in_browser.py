"""The partner's and the operator's day in a real browser (Chromium), as a newcomer walks it: each clicks their
way through the portal's pages, against a real worker, and every page they see is looked at on a phone as well
(tests/screens.py). With E31_SCREENSHOTS set, the pages are shot for docs/screenshots/ on the way.

Needs Debian's `chromium`; CI sets E31_BROWSER_TESTS=1, so there it cannot skip."""

import io
import json
import re
import zipfile

import pytest

from jobs import services
from jobs.models import Job, State
from jobs.spec import Data, JobSpec, NamedFile, Request, Work
from portal.models import Application
from tests.client.world import grown_csv
from tests.datasets import csv_bytes
from tests.jobs.pages.test_charts_in_browser import DRAWN, assert_drawn_as_lines
from tests.screens import look
from tests.support import EXAMPLE, ids_from, needs_chromium, state_is, submit_example, wait_for, wait_for_end

pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_chromium,
]

APPLICANT = "ada@lovelace.example"
PASSWORD = "a long passphrase for the journey 31"
LINK = re.compile(r"https?://\S+/accounts/reset/\S+/")


@pytest.fixture(autouse=True)
def long_ids(transactional_db):
    """Every page is looked at with the ids of a portal that has run a million jobs."""
    ids_from(1_234_567, "jobs", "billing", "portal")


@pytest.fixture(autouse=True)
def a_client_wheel(tmp_path, settings):
    """The design-partners page as `make run` serves it, offering the client's wheel with the commands to
    install it, whose long first line must wrap, not scroll (a run without a wheel built hid that)."""
    downloads = tmp_path / "static" / "downloads"
    downloads.mkdir(parents=True)
    (downloads / "e31-0.1.0-py3-none-any.whl").write_bytes(b"PK")
    settings.STATICFILES_DIRS = [*settings.STATICFILES_DIRS, tmp_path / "static"]


def log_in(page, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Email").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state()


def apply(page, base: str) -> None:
    page.goto(base)
    look(page, "landing")
    page.get_by_role("link", name="Design partners").first.click()
    look(page, "design-partners")
    page.get_by_role("link", name=re.compile("Apply")).first.click()
    look(page, "apply")
    page.get_by_role("button", name="Send the application").click()
    page.locator(".field.invalid").first.wait_for()
    look(page, "apply-errors")
    page.get_by_label("Your name").fill("Ada Lovelace")
    page.get_by_label("Work email").fill(APPLICANT)
    page.get_by_label("Organisation").fill("Analytical Engines")
    page.get_by_label("The dataset").fill("Twelve million punched cards of Bernoulli numbers, as CSV.")
    page.get_by_label("The pass").fill("Clean the table: drop malformed cards, type the columns.")
    page.get_by_label("GPU-hours you expect").fill("40")
    page.get_by_role("button", name="Send the application").click()
    page.wait_for_url(re.compile(r"/design-partners/apply/thanks/$"))
    look(page, "applied")


def run_action(page, action: str, row: str) -> None:
    """Tick the change list's row that mentions `row` and run the action on it."""
    page.get_by_role("row", name=re.compile(re.escape(row))).get_by_role("checkbox").check()
    page.select_option("select[name=action]", action)
    page.get_by_role("button", name="Go").click()
    page.wait_for_load_state()


def accept(page, base: str, applicant: str, seen: bool = True) -> str:
    """The operator accepts the application in the admin with the Accept action; returns what the admin said."""
    page.goto(f"{base}/admin/portal/application/")
    if seen:
        look(page, "admin-applications")
    run_action(page, "accept", applicant)
    said = page.inner_text("ul.messagelist")
    if seen:
        look(page, "admin-application-accepted")
    return said


def slow_job(organisation, partner, seconds_per_batch: str = "5", **params) -> Job:
    """test-slow-echo over 2,000 records on both slots, 5 s a batch of 50: it holds them until it is cancelled."""
    data = Data(file=NamedFile(io.BytesIO(csv_bytes(2000)), "numbers.csv"))
    work = Work("test-slow-echo", {"seconds_per_batch": seconds_per_batch, **params})
    return services.submit_job(organisation, partner, JobSpec(work, data, Request(2, 1)))


def state_of(job: Job) -> str:
    job.refresh_from_db()
    return job.state


def test_a_new_partner_applies_is_accepted_and_runs_a_first_job_to_its_receipt(
    browser, live_server, fleet, operator, rate_card, mailbox, tmp_path
):  # fmt: skip
    base = live_server.url
    applicant = browser.new_context().new_page()
    apply(applicant, base)
    assert Application.objects.get().status == Application.Status.NEW

    console = browser.new_context().new_page()
    log_in(console, base, "operator", "pw-operator")
    assert console.url == f"{base}/admin/", "an operator in no organisation lands in the console"
    said = accept(console, base, APPLICANT)
    assert "Accepted Ada Lovelace: organisation Analytical Engines" in said and f"Emailed {APPLICANT}" in said

    (email,) = wait_for(lambda: mailbox.to(APPLICANT), what="the set-password email")
    applicant.goto(LINK.search(email.get_content())[0])
    look(applicant, "set-password")
    applicant.get_by_label("New password", exact=True).fill(PASSWORD)
    applicant.get_by_label("New password confirmation").fill(PASSWORD)
    applicant.get_by_role("button", name="Set the password").click()
    applicant.get_by_text("Your password is set").wait_for()
    look(applicant, "password-set")
    applicant.get_by_role("link", name="Log in").last.click()
    look(applicant, "login")
    applicant.get_by_role("link", name="Forgot password?").click()
    look(applicant, "password-reset")
    applicant.get_by_label("Email").fill(APPLICANT)
    applicant.get_by_role("button", name="Send the link").click()
    applicant.get_by_text("Check your email").wait_for()
    look(applicant, "password-reset-sent")
    log_in(applicant, base, APPLICANT, PASSWORD)
    assert applicant.url == f"{base}/jobs/"
    look(applicant, "jobs-empty")

    with applicant.expect_download() as download:
        applicant.locator("p.empty").get_by_role("link", name="customers.csv").click()
    dataset = tmp_path / "customers.csv"
    download.value.save_as(dataset)
    assert dataset.read_bytes() == EXAMPLE.read_bytes()
    # Their own data is bigger than a sample takes (E31_SAMPLE_MAX_RECORDS), so the sample sizes a pass: one
    # that ran over every record would be the whole result, and its pass refused.
    (tmp_path / "theirs").mkdir()
    dataset = grown_csv(tmp_path / "theirs" / "customers.csv", 10 * 1024 * 1024)

    applicant.get_by_role("link", name="New job").first.click()
    look(applicant, "job-new")
    applicant.get_by_role("button", name="Submit the job").click()
    applicant.locator(".error-box").first.wait_for()
    look(applicant, "job-new-errors")
    applicant.set_input_files("input[name=data]", str(dataset))
    state_is(applicant, "done")
    applicant.check("input[name=work][value=clean-table]")
    applicant.check("input[name=sample]")
    look(applicant, "job-new-filled")
    applicant.get_by_role("button", name="Submit the job").click()
    applicant.wait_for_url(re.compile(r"/jobs/\d+/$"))
    sample = wait_for_end(Job.objects.get(kind=Job.Kind.SAMPLE), timeout=120)
    assert sample.state == State.SUCCEEDED, sample.error
    assert not sample.sample_was_whole, sample.sample_result
    applicant.wait_for_selector("form.pass-form", timeout=30_000)  # brought in when the page saw the sample end
    look(applicant, "sample-done")

    applicant.get_by_role("button", name="Run the full pass").click()
    applicant.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = wait_for_end(Job.objects.get(kind=Job.Kind.PASS), timeout=120)
    assert job.state == State.SUCCEEDED and job.sample == sample, job.error
    applicant.wait_for_selector("progress.bar.succeeded", timeout=30_000)
    applicant.get_by_role("link", name="Download all (.zip)").wait_for(timeout=30_000)
    look(applicant, "job-succeeded")
    assert_drawn_as_lines(applicant.evaluate(DRAWN), 1280)  # a pass of seconds: lines under round times, no dot

    with applicant.expect_download() as download:
        applicant.get_by_role("link", name="Download all (.zip)").click()
    archive = zipfile.ZipFile(io.BytesIO(download.value.path().read_bytes()))
    manifest = json.loads(archive.read(f"job-{job.pk}-manifest.json"))
    assert manifest["records"]["out"] + manifest["records"]["rejected"] == job.records_total

    applicant.get_by_role("link", name="Ledger").click()
    applicant.get_by_role("link", name=f"#{job.pk}").first.wait_for()
    look(applicant, "ledger")
    applicant.goto(f"{base}/jobs/{job.pk}/")
    applicant.get_by_role("link", name="receipt").click()
    applicant.get_by_text(f"#{job.pk}").first.wait_for()
    look(applicant, "receipt")

    applicant.get_by_role("link", name="Jobs", exact=True).click()
    applicant.wait_for_url(f"{base}/jobs/")
    look(applicant, "jobs")
    applicant.get_by_role("link", name=re.compile(re.escape(APPLICANT))).click()
    applicant.get_by_text("Analytical Engines").first.wait_for()
    look(applicant, "account")
    applicant.get_by_role("link", name="Change your password").click()
    look(applicant, "password-change")
    applicant.get_by_role("link", name="API tokens").first.click()
    look(applicant, "api-tokens")
    applicant.goto(f"{base}/jobs/{job.pk + 1000}/")
    assert applicant.get_by_role("link", name="Jobs", exact=True).count(), "a way on from a page not found"
    look(applicant, "not-found")


def test_an_operator_accepts_an_applicant_holds_a_job_lifts_the_hold_and_watches_the_queue(
    browser, live_server, fleet, organisation, partner, operator, rate_card, mailbox
):  # fmt: skip
    base = live_server.url
    Application.objects.create(
        name="Grace Hopper", email="grace@cobol.example", organisation="Compilers Inc", gpu_hours=12,
        dataset="Forty thousand COBOL listings.", work="Embed every listing.",
    )  # fmt: skip
    console = browser.new_context().new_page()
    log_in(console, base, "operator", "pw-operator")
    look(console, "admin")
    console.goto(f"{base}/jobs/")
    look(console, "no-organisation")
    said = accept(console, base, "grace@cobol.example", seen=False)
    assert "Accepted Grace Hopper: organisation Compilers Inc" in said
    assert wait_for(lambda: mailbox.to("grace@cobol.example"), what="the set-password email")

    running = slow_job(organisation, partner)
    wait_for(lambda: running.allocations.filter(held_to=None).count() == 2, timeout=60, what="both slots held")
    waiting = submit_example(organisation, partner)
    wait_for(lambda: state_of(waiting) == State.QUEUED, timeout=60, what="the second job to queue")

    console.goto(f"{base}/admin/jobs/job/")
    look(console, "admin-jobs")
    console.locator(f"input[name=_selected_action][value='{waiting.pk}']").check()
    console.select_option("select[name=action]", "put_on_hold")
    console.get_by_role("button", name="Go").click()
    console.get_by_label("Reason").fill("maintenance of the fleet until 14:00 UTC")
    look(console, "admin-put-on-hold")
    console.get_by_role("button", name="Put on hold").click()
    console.get_by_text(f"Job #{waiting.pk} is on hold").wait_for()
    waiting.refresh_from_db()
    assert waiting.on_hold and waiting.on_hold_reason == "maintenance of the fleet until 14:00 UTC"

    console.goto(f"{base}/admin/jobs/job/queue/")
    console.get_by_text("maintenance of the fleet").first.wait_for()
    look(console, "queue")

    owner = browser.new_context().new_page()
    log_in(owner, base, "partner", "pw-partner")
    owner.goto(f"{base}/jobs/{waiting.pk}/")
    assert owner.inner_text(".status .state") == "On hold"
    assert "maintenance of the fleet until 14:00 UTC" in owner.inner_text(".status")
    look(owner, "job-on-hold")
    owner.goto(f"{base}/jobs/{running.pk}/")
    owner.wait_for_selector(".status .state.running")
    look(owner, "job-running")
    without_script = browser.new_context(java_script_enabled=False).new_page()
    log_in(without_script, base, "partner", "pw-partner")
    without_script.goto(f"{base}/jobs/{running.pk}/")
    assert "Without JavaScript this page reloads itself every 10 s." in without_script.inner_text(".status")
    look(without_script, "job-running-without-javascript")

    console.goto(f"{base}/admin/jobs/job/?on_hold=yes")
    console.locator(f"input[name=_selected_action][value='{waiting.pk}']").check()
    console.select_option("select[name=action]", "lift_hold")
    console.get_by_role("button", name="Go").click()
    console.get_by_text("Lifted the hold of 1 job").wait_for()
    owner.goto(f"{base}/jobs/{waiting.pk}/")
    assert owner.inner_text(".status .state") == "Queued", "it waits for the slots the first job holds"
    look(owner, "job-queued")

    owner.goto(f"{base}/jobs/{running.pk}/")
    owner.once("dialog", lambda dialog: dialog.accept())
    owner.get_by_role("button", name="Cancel job").click()
    owner.wait_for_selector(".status .state.cancelled", timeout=30_000)
    look(owner, "job-cancelled")
    assert wait_for_end(waiting, timeout=180).state == State.SUCCEEDED, waiting.error
    poisoned = slow_job(organisation, partner, seconds_per_batch="0", fail_at_record="600")
    assert wait_for_end(poisoned).state == State.FAILED
    owner.goto(f"{base}/jobs/{poisoned.pk}/")
    assert "record 600 is poison" in owner.inner_text(".status")
    look(owner, "job-failed")

    owner.goto(f"{base}/jobs/")
    look(owner, "jobs-ended")
    console.goto(f"{base}/admin/jobs/job/{waiting.pk}/change/")
    look(console, "admin-job")
    console.goto(f"{base}/admin/jobs/job/queue/")
    look(console, "queue-empty")
    console.goto(f"{base}/admin/jobs/node/")
    look(console, "admin-nodes")
    console.goto(f"{base}/admin/billing/ratecard/")
    look(console, "admin-rate-cards")
    console.goto(f"{base}/admin/billing/ledgerentry/")
    look(console, "admin-ledger")
