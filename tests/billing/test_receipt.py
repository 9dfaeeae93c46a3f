"""A job's receipt: what an ended job was charged, line by line from its ledger entries."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.metering import record_staging
from billing.models import RateCard
from jobs import lifecycle
from jobs.models import Gpu, Job, State
from portal import units
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def ended_job(organisation, partner, online_slots, rate_card):
    RateCard.objects.filter(pk=rate_card.pk).update(rate_per_staged_gb=Decimal("0.005"))
    job = make_job(
        organisation, State.QUEUED, created_by=partner, source_name="customers.csv", gpus=2,
        input_bytes=2_500_000_000, input_sha256="ab" * 32,
    )  # fmt: skip
    staged = timezone.now() - timedelta(minutes=5)
    record_staging(Job, job=job, size=2_500_000_000, started=staged, finished=staged + timedelta(seconds=12))
    assert lifecycle.start_hold(job, online_slots[:2])
    Job.objects.filter(pk=job.pk).update(started_at=staged + timedelta(minutes=1))
    job.allocations.update(held_from=staged + timedelta(minutes=1))
    lifecycle.finish_pass(job)
    Job.objects.filter(pk=job.pk).update(state=State.SUCCEEDED, ended_at=timezone.now())
    return Job.objects.get(pk=job.pk)


def test_it_lists_each_charge_and_the_total(ended_job, partner_client):
    page = partner_client.get(f"/billing/receipts/{ended_job.pk}/").content.decode()
    staging, hold = ended_job.ledger_entries.order_by("held_from")
    assert f"Receipt for job #{ended_job.pk} <small>E31-partner-lab-{ended_job.pk}</small>" in page
    assert "Staging 2.5\xa0GB from upload" in page
    # The quantity and the rate each in a column, their units under them; on a phone, on a line under the charge.
    assert "2.5<small>GB</small></td>" in page and "0.005 USD<small>per GB</small></td>" in page
    assert '<small class="narrow-only">2.5 GB at <span class="when">0.005 USD</span> per GB</small>' in page
    assert staging.amount == Decimal("0.0125") and '<td class="num amount">0.01 USD</td>' in page
    gpu_hours = units.hundredths(hold.gpu_hours)
    assert "2 CPU slots held 4 min" in page and ", per started second<small>" in page
    assert f"{gpu_hours}<small>CPU slot-hours</small></td>" in page and "3.60 USD<small>per CPU slot-hour" in page
    assert f'{gpu_hours} CPU slot-hours at <span class="when">3.60 USD</span> per CPU slot-hour</small>' in page
    assert f'<th class="num amount">{units.money(staging.amount + hold.amount, "USD")}</th>' in page
    assert "by partner" in page and "succeeded" in page and "ab" * 32 in page
    for entry in (staging, hold):
        assert f'<code class="hash" title="HMAC-SHA256 {entry.hash}">{entry.hash[:12]}…</code>' in page
    assert f'href="/billing/receipts/{ended_job.pk}/"' in partner_client.get(f"/jobs/{ended_job.pk}/").content.decode()


def test_it_names_what_the_job_held_whatever_the_fleet_has_now(ended_job, partner_client):
    Gpu.objects.update(last_seen=None)  # no slot online: the fleet would say "GPU"
    page = partner_client.get(f"/billing/receipts/{ended_job.pk}/").content.decode()
    assert "2 CPU slots held" in page and "per CPU slot-hour" in page and "GPU-hour" not in page


def test_only_the_organisation_reads_it(ended_job, outsider_client, teammate, operator):
    assert outsider_client.get(f"/billing/receipts/{ended_job.pk}/").status_code == 404
    assert client_for(teammate).get(f"/billing/receipts/{ended_job.pk}/").status_code == 200
    assert client_for(operator).get(f"/billing/receipts/{ended_job.pk}/").status_code == 404, "in no organisation"
    assert client_for(teammate).get("/billing/receipts/999999/").status_code == 404


def test_a_job_that_has_not_ended_has_no_receipt_yet(organisation, online_slots, partner_client):
    job = make_job(organisation, State.QUEUED)
    assert lifecycle.start_hold(job, online_slots[:1])
    response = partner_client.get(f"/billing/receipts/{job.pk}/")
    assert response.status_code == 404
    assert f"Job #{job.pk} is running. Its receipt is issued when it ends" in response.content.decode()
    assert "receipts" not in partner_client.get(f"/jobs/{job.pk}/").content.decode()


def test_a_job_that_ended_before_anything_was_charged_says_so(organisation, online_slots, partner_client):
    job = make_job(organisation)
    lifecycle.cancel(job)
    page = partner_client.get(f"/billing/receipts/{job.pk}/").content.decode()
    assert "Nothing was charged: the job ended before its data was staged or any CPU slot was held." in page


@pytest.mark.parametrize(
    ("count", "shown"),
    [(0, "0"), (1, "0.000000001"), (535_012, "0.000535012"), (2_500_000_000, "2.5"), (10**12, "1000")],
)
def test_it_shows_bytes_as_the_gb_a_rate_prices(count, shown):
    assert units.gigabytes(count) == shown
