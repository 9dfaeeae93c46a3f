"""The Content-Security-Policy in a real browser (Chromium): the main pages, the job form's resumable upload,
the htmx polling of a job's page and of the operators' queue all work under it, and the browser reports no
violation. Needs Debian's `chromium`; CI sets E31_BROWSER_TESTS=1, so there it cannot skip."""

import os
import re

import pytest
from django.utils import timezone

from jobs.models import Job, State
from tests.factories import make_job
from tests.support import CHROMIUM, state_is, wait_for, wait_for_end

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not CHROMIUM and not os.environ.get("E31_BROWSER_TESTS"),
        reason="no chromium here (apt install chromium); CI runs this test",
    ),
]

# Injected by the browser before any page script, so outside the policy: it records what the policy refused,
# and marks the page once htmx swapped a fragment in (polling ran). The test reads both without the eval that
# wait_for_function would need, which the policy refuses.
WATCH = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  const where = `${event.sourceFile}:${event.lineNumber}`;
  window.__violations.push(`${event.violatedDirective} refused ${event.blockedURI || "inline"} (${where})`);
});
document.addEventListener("htmx:afterSwap", () => { document.documentElement.dataset.swapped = "yes"; });
"""


class Watched:
    """A browser page whose policy violations, console errors and answers without a policy are collected."""

    def __init__(self, browser, base: str):
        self.base = base
        self.page = browser.new_page()
        self.page.add_init_script(WATCH)
        self.problems: list[str] = []
        self.page.on("console", self._console)
        self.page.on("response", self._response)

    def _console(self, message) -> None:
        where = message.location.get("url", "")
        # The admin's pages name no icon, so Chromium asks for /favicon.ico on its own: not the page's doing.
        if where.endswith("/favicon.ico"):
            return
        if message.type == "error" or "Content Security Policy" in message.text:
            self.problems.append(f"console: {message.text} ({where})")

    def _response(self, response) -> None:
        if response.status >= 400:
            self.problems.append(f"{response.status} on {response.url}")
        is_page = response.request.resource_type == "document" and response.url.startswith(self.base)
        if is_page and "content-security-policy" not in response.headers:
            self.problems.append(f"no policy on {response.url}")

    def visit(self, path: str) -> None:
        self.page.goto(f"{self.base}{path}")
        self.check(path)

    def check(self, where: str) -> None:
        violations = self.page.evaluate("window.__violations")
        assert not violations and not self.problems, f"{where}: {violations + self.problems}"

    def log_in(self, username: str, password: str, path: str = "/accounts/login/") -> None:
        self.visit(path)
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", password)
        self.page.click("form [type=submit], form button.primary")
        self.page.wait_for_load_state()
        self.check("after logging in")

    def wait_for_a_swap(self) -> None:
        self.page.evaluate("delete document.documentElement.dataset.swapped")
        self.page.wait_for_selector("html[data-swapped]", state="attached", timeout=60_000)


def test_the_pages_work_under_the_policy_without_a_violation(
    browser, live_server, fleet, partner, operator, rate_card, dataset
):  # fmt: skip
    visitor = Watched(browser, live_server.url)
    visitor.visit("/")
    visitor.visit("/design-partners/")
    visitor.visit("/design-partners/apply/")
    visitor.visit("/accounts/password_reset/")

    partner_page = Watched(browser, live_server.url)
    partner_page.log_in("partner", "pw-partner")
    partner_page.visit("/jobs/new/")
    partner_page.page.set_input_files("input[name=data]", str(dataset))
    state_is(partner_page.page, "done")
    partner_page.check("the job form's upload")
    partner_page.page.check("input[name=work][value=clean-table]")
    partner_page.page.click("button.primary")
    partner_page.page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    partner_page.wait_for_a_swap()
    job = wait_for_end(Job.objects.get(), timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    partner_page.page.wait_for_selector("progress.bar.succeeded", timeout=30_000)
    partner_page.check("the job's page, polled by htmx")
    partner_page.visit("/jobs/")
    partner_page.visit("/billing/ledger/")
    partner_page.visit(f"/billing/receipts/{job.pk}/")

    operator_page = Watched(browser, live_server.url)
    operator_page.log_in("operator", "pw-operator", "/admin/login/")
    operator_page.visit("/admin/")
    operator_page.visit("/admin/jobs/job/")
    operator_page.visit(f"/admin/jobs/job/{job.pk}/change/")
    operator_page.visit("/admin/jobs/job/queue/")
    operator_page.wait_for_a_swap()
    operator_page.check("the operators' queue, polled by htmx")


def test_the_cancel_button_asks_first_without_an_inline_handler(browser, live_server, partner, organisation):
    # On hold: a worker left running never starts it.
    job = make_job(organisation, State.QUEUED, on_hold_since=timezone.now())
    watched = Watched(browser, live_server.url)
    watched.log_in("partner", "pw-partner")
    watched.visit(f"/jobs/{job.pk}/")
    asked = []
    watched.page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    watched.page.click("button.danger")
    wait_for(lambda: asked, what="the confirmation")
    assert asked == [f"Cancel job #{job.pk}?"]
    job.refresh_from_db()
    assert job.state == State.QUEUED, "dismissed: nothing sent"
    watched.page.once("dialog", lambda dialog: dialog.accept())
    watched.page.click("button.danger")
    wait_for(lambda: Job.objects.get(pk=job.pk).state == State.CANCELLED, what="the job to be cancelled")
    watched.check("the job's page")
