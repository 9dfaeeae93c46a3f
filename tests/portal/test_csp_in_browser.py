"""The Content-Security-Policy in a real browser (Chromium): the main pages, the job form's resumable upload,
the htmx polling of a job's page and of the operators' queue all work under it, and the browser reports no
violation. Needs Debian's `chromium`; CI sets E31_BROWSER_TESTS=1, so there it cannot skip."""

import re

import pytest
from django.utils import timezone

from jobs.models import Job, State
from tests.factories import make_job
from tests.support import Watched, needs_chromium, state_is, wait_for, wait_for_end

pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_chromium,
]


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
    partner_page.page.wait_for_selector("#panels .timeline .state.succeeded", timeout=10_000)  # out of band
    assert partner_page.page.locator("#panels").count() == 1, "swapped in place, not added"
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
