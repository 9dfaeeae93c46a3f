"""The job form says what a job can cost before it is asked for: the rate in force and GPUs × hours × rate,
live as the request is typed, with a warning at once when it asks for more than the fleet has online."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import RateCard
from tests.support import logged_in_page, needs_chromium


@pytest.mark.django_db
def test_the_form_shows_the_rate_and_the_most_the_default_request_costs(partner_client, online_slots, rate_card):
    page = partner_client.get("/jobs/new/").content.decode()
    assert "At 3.60 USD per CPU slot-hour, this job costs at most" in page
    assert "<strong data-most>7.20 USD</strong>" in page  # the form's 2 slots for 1 h
    assert "You pay only for the time its CPU slots are held." in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("gpus", "hours", "shown"),
    [
        ("3", "0.25", "2.70 USD"),
        ("1", "0.01", "0.04 USD"),
        ("abc", "1", "CPU slots × hours × the rate"),
        ("2", "-1", "CPU slots × hours × the rate"),
        ("2", "NaN", "CPU slots × hours × the rate"),
        ("٢", "1", "CPU slots × hours × the rate"),
        ("2", "1e400", "CPU slots × hours × the rate"),
    ],
)
def test_a_form_sent_back_shows_the_cost_of_what_was_typed(partner_client, online_slots, rate_card, gpus, hours, shown):
    response = partner_client.post("/jobs/new/", {"gpus": gpus, "hours": hours, "work": "clean-table"})
    assert response.status_code == 400
    assert f"<strong data-most>{shown}</strong>" in response.content.decode()


@pytest.mark.django_db
def test_it_names_the_staging_rate_when_the_card_has_one(partner_client, online_slots):
    RateCard.objects.create(
        rate_per_gpu_hour=Decimal("2.50"),
        rate_per_staged_gb=Decimal("0.0200"),
        currency="EUR",
        effective_from=timezone.now() - timedelta(hours=1),
    )
    page = partner_client.get("/jobs/new/").content.decode()
    assert "At 2.50 EUR per CPU slot-hour and 0.02 EUR per GB staged, this job costs at most" in page
    assert "<strong data-most>5.00 EUR</strong>" in page


@pytest.mark.django_db
def test_without_a_rate_it_says_nothing_is_billed(partner_client, online_slots):
    page = partner_client.get("/jobs/new/").content.decode()
    assert "No rate is set yet: nothing is billed until the operators set one." in page
    assert "data-most" not in page


@needs_chromium
@pytest.mark.django_db(transaction=True)
def test_the_cost_and_the_fleet_warning_follow_what_is_typed(browser, live_server, online_slots, rate_card, partner):
    page = logged_in_page(browser, live_server.url)
    page.goto(f"{live_server.url}/jobs/new/")
    most = page.locator("[data-most]")
    warning = page.locator("[data-fleet-warning]")
    page.fill("input[name=gpus]", "3")
    page.fill("input[name=hours]", "0.5")
    assert most.inner_text() == "5.40 USD"
    assert warning.is_hidden()
    page.fill("input[name=gpus]", "6")
    assert most.inner_text() == "10.80 USD"
    assert warning.is_visible()
    assert warning.inner_text() == "The fleet has 4 CPU slots online: ask for 4 or fewer, or choose long-narrow."
    page.check("input[name=shape][value=long-narrow]")
    assert warning.is_hidden(), "one slot for 6 × 0.5 h"
    assert most.inner_text() == "10.80 USD", "as many slot-hours either way"
    page.fill("input[name=gpus]", "")
    assert most.inner_text() == "CPU slots × hours × the rate"
    assert warning.is_hidden()
