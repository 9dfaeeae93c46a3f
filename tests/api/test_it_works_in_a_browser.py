"""The API's docs page (Swagger UI from drf-spectacular-sidecar) and the API tokens page in a real browser
(Chromium) under the portal's Content-Security-Policy: they load, work, and the browser reports no violation.
Needs Debian's `chromium`; CI sets E31_BROWSER_TESTS=1, so there it cannot skip."""

import re

import pytest

from api.models import ApiToken
from tests.support import Watched, needs_chromium, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_chromium,
]


def test_the_docs_page_renders_the_schema_under_the_policy(browser, live_server):
    docs = Watched(browser, live_server.url)
    docs.visit("/api/v1/docs/")
    docs.page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
    assert "E31 portal API" in docs.page.inner_text(".swagger-ui .info .title")
    docs.page.get_by_text("/api/v1/jobs/{id}/output/{name}").first.wait_for(timeout=30_000)
    assert docs.page.locator(".swagger-ui .btn.authorize").count() == 1, "a bearer token can be given"
    docs.check("the docs page, rendered")


def test_the_tokens_page_makes_and_revokes_a_token_under_the_policy(browser, live_server, partner):
    page = Watched(browser, live_server.url)
    page.log_in("partner", "pw-partner")
    page.visit("/account/tokens/")
    page.page.fill("input[name=name]", "laptop")
    page.page.fill("input[name=expiry_days]", "7")
    page.page.click("button.primary")
    page.page.wait_for_selector("#new-token")
    assert re.fullmatch(r"e31_[0-9a-f]{64}", page.page.inner_text("#new-token"))
    page.check("the new token")
    page.page.once("dialog", lambda dialog: dialog.accept())
    page.page.click("button.danger")
    page.page.wait_for_selector("text=is revoked")
    wait_for(lambda: not ApiToken.objects.exists(), what="the token to be revoked")
    page.check("after revoking")
