"""A job's page in a real browser (Chromium): the polled status card follows the job, and the panels
below it (the timeline, the data) follow it too when its state changes, swapped in out of band, with
no reload; without JavaScript the page shows them all the same. Needs Debian's `chromium`."""

import pytest

from jobs import lifecycle
from jobs.models import State
from tests.factories import make_job
from tests.support import Watched, logged_in_page, needs_chromium

pytestmark = [pytest.mark.django_db(transaction=True), needs_chromium]


def test_the_panels_follow_a_change_of_state_without_a_reload(
    browser, live_server, partner, organisation, online_slots
):
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=2, records_total=1000)
    watched = Watched(browser, live_server.url)
    watched.log_in("partner", "pw-partner")
    watched.visit(f"/jobs/{job.pk}/")
    assert "Number 1 in the queue." in watched.page.inner_text("#progress")
    watched.page.evaluate("document.querySelector('#panels').dataset.loaded = 'yes'")

    assert lifecycle.start_hold(job, online_slots[:2])
    watched.page.wait_for_selector("#panels .timeline .state.running", timeout=15_000)
    assert "Holding 2 CPU slots" in watched.page.inner_text("#progress")
    assert watched.page.locator("#panels").count() == 1, "swapped in place, not added"
    assert watched.page.evaluate("document.querySelector('#panels').dataset.loaded") is None, "the panels came anew"
    assert watched.page.url.endswith(f"/jobs/{job.pk}/"), "no reload"
    watched.check("the job's page, its panels swapped out of band")


def test_the_page_shows_everything_without_javascript(browser, live_server, partner, organisation, online_slots):
    job = make_job(organisation, State.QUEUED, source_name="customers.csv", gpus=2, records_total=1000)
    lifecycle.start_hold(job, online_slots[:2])
    context = browser.new_context(java_script_enabled=False)
    page = logged_in_page(context, live_server.url)
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    text = page.inner_text("body")
    assert "Holding 2 CPU slots" in text and "Timeline" in text and "customers.csv" in text
    context.close()
