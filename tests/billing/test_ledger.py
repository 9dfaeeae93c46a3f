"""The ledger: one entry per released hold, priced per started second, never changed, exported with
each entry's hash."""

import csv
import io
import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from django.utils.html import escape

from billing.anchor import head_of
from billing.metering import meter_for, price
from billing.models import LedgerEntry, RateCard
from jobs import lifecycle
from jobs.models import Gpu, Job, State
from jobs.signals import staging_finished
from portal import units
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_job(organisation, online_slots, rate_card):
    job = make_job(organisation, State.QUEUED, gpus=2)
    assert lifecycle.start_hold(job, online_slots[:2])
    job.refresh_from_db()
    return job


def test_it_prices_gpus_times_hours_held_at_the_rate(rate_card):
    start = timezone.now()
    meter = price(4, start, start + timedelta(minutes=90, microseconds=1))
    assert meter.seconds == 5401, "a started second counts"
    assert meter.gpu_hours == Decimal("6.001111")
    assert meter.amount == (Decimal("6.001111") * Decimal("3.60")).quantize(Decimal("0.0001"))


def test_it_uses_the_rate_in_force_when_the_hold_started(rate_card):
    later = RateCard.objects.create(rate_per_gpu_hour=Decimal("9"), effective_from=timezone.now() + timedelta(hours=1))
    start = timezone.now()
    assert price(1, start, start + timedelta(hours=2)).rate == Decimal("3.60")
    assert price(1, later.effective_from, later.effective_from + timedelta(hours=1)).rate == Decimal("9")


def test_it_writes_one_entry_when_the_hold_is_released(running_job):
    assert meter_for(running_job).gpus == 2
    assert lifecycle.release(running_job)
    assert not lifecycle.release(running_job), "releasing twice writes nothing more"
    entry = LedgerEntry.objects.get(job=running_job)
    allocations = list(running_job.allocations.all())
    assert entry.gpus == 2
    assert entry.held_from == min(a.held_from for a in allocations)
    assert entry.held_to == max(a.held_to for a in allocations)
    assert meter_for(running_job).gpu_hours == entry.gpu_hours


def test_a_job_noticed_late_past_its_time_limit_is_billed_up_to_the_limit_only(running_job):
    """Beat down for two hours, or one long batch: the hold still ends at the hours asked for."""
    three_hours_ago = timezone.now() - timedelta(hours=3)
    Job.objects.filter(pk=running_job.pk).update(started_at=three_hours_ago)
    running_job.allocations.update(held_from=three_hours_ago)
    running_job.refresh_from_db()
    assert running_job.time_limit_passed()

    assert lifecycle.time_out(running_job)
    assert {a.held_to for a in running_job.allocations.all()} == {three_hours_ago + timedelta(hours=1)}
    entry = LedgerEntry.objects.get(job=running_job)
    assert (entry.gpus, entry.seconds, entry.gpu_hours, entry.amount) == (2, 3600, Decimal(2), Decimal("7.2000"))
    running_job.refresh_from_db()
    assert running_job.state == State.TIMED_OUT and running_job.ended_at > entry.held_to


def test_a_job_timed_out_before_its_limit_is_up_is_billed_until_it_ended(running_job):
    """An operator's early time-out (or a clock that disagrees) never bills past now."""
    assert lifecycle.time_out(running_job)
    entry = LedgerEntry.objects.get(job=running_job)
    assert entry.held_to <= timezone.now() and entry.seconds <= 1


def test_it_never_updates_or_deletes_an_entry(running_job):
    lifecycle.release(running_job)
    entry = LedgerEntry.objects.get()
    entry.amount = Decimal(0)
    with pytest.raises(TypeError, match="never updated"):
        entry.save()
    with pytest.raises(TypeError, match="never deleted"):
        entry.delete()
    with pytest.raises(TypeError, match="never updated"):
        LedgerEntry.objects.update(amount=0)
    with pytest.raises(TypeError, match="never deleted"):
        LedgerEntry.objects.all().delete()


def test_it_shows_and_exports_only_the_organisations_entries(
    running_job, partner_client, outsider_client, other_organisation
):
    lifecycle.release(running_job)
    entry = LedgerEntry.objects.get()
    head = head_of(running_job.organisation)
    assert (head.entries, head.hash, head.at) == (1, entry.hash, entry.created)
    page = partner_client.get("/billing/ledger/").content.decode()
    assert f"/jobs/{running_job.pk}/" in page
    shown = f'<code class="hash" title="HMAC-SHA256 {entry.hash}">{entry.hash[:12]}…</code>'
    assert shown in page, "its hash, in full on hover"

    rows = list(csv.DictReader(io.StringIO(partner_client.get("/billing/ledger.csv").getvalue().decode())))
    assert rows == [
        {
            "job": str(running_job.pk),
            "kind": "hold",
            "gpus": "2",
            "held_from": entry.held_from.isoformat(),
            "held_to": entry.held_to.isoformat(),
            "seconds": str(entry.seconds),
            "gpu_hours": str(entry.gpu_hours),
            "bytes": "",
            "source": "",
            "rate": str(entry.rate),
            "currency": "USD",
            "amount": str(entry.amount),
            "reason": "",
            "hash": entry.hash,
            "previous_hash": "",
        },
        dict.fromkeys(rows[0], "") | {"kind": "head", "held_to": head.written, "reason": head.line, "hash": entry.hash},
    ]
    exported = json.loads(partner_client.get("/billing/ledger.json").getvalue())
    assert exported["ledger_head"] == head.as_json()
    assert exported["entries"][0] == rows[0] | {
        "job": running_job.pk,
        "gpus": 2,
        "seconds": entry.seconds,
        "bytes": None,
    }
    assert f"/jobs/{running_job.pk}/" not in outsider_client.get("/billing/ledger/").content.decode()
    nothing = head_of(other_organisation)
    assert list(csv.DictReader(io.StringIO(outsider_client.get("/billing/ledger.csv").getvalue().decode()))) == [
        dict.fromkeys(rows[0], "") | {"kind": "head", "reason": nothing.line}
    ]
    assert json.loads(outsider_client.get("/billing/ledger.json").getvalue()) == {
        "ledger_head": nothing.as_json(),
        "entries": [],
    }


def test_it_shows_the_ledger_read_only_to_operators(running_job, operator):
    lifecycle.release(running_job)
    client = client_for(operator)
    entry = LedgerEntry.objects.get()
    listed = client.get("/admin/billing/ledgerentry/").content.decode()
    assert f"{entry.held_from:%Y-%m-%d %H:%M:%S} → " in listed and escape(units.money(entry.amount, "USD")) in listed
    assert '<td class="field-what">CPU slot hold</td>' in listed and "GPU hold" not in listed, "it held CPU slots"
    Gpu.objects.filter(allocations__job=running_job).update(kind=Gpu.Kind.GPU)
    assert '<td class="field-what">GPU hold</td>' in client.get("/admin/billing/ledgerentry/").content.decode()
    assert client.get(f"/admin/billing/ledgerentry/{entry.pk}/delete/").status_code == 403
    assert client.get("/admin/billing/ledgerentry/add/").status_code == 403
    assert client.get("/admin/billing/ratecard/add/").status_code == 200


def test_it_records_staging_free_unless_the_rate_card_prices_it(organisation, rate_card):
    job = make_job(organisation)
    start = timezone.now()
    staging_finished.send(sender=Job, job=job, size=3 * 10**9, started=start, finished=start + timedelta(seconds=9.5))
    entry = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.STAGING)
    assert (entry.bytes, entry.seconds, entry.gpus, entry.gpu_hours, entry.amount) == (3 * 10**9, 10, 0, 0, 0)
    assert entry.source_kind == "upload"

    RateCard.objects.create(
        rate_per_gpu_hour=Decimal("3.60"), rate_per_staged_gb=Decimal("0.02"), effective_from=start - timedelta(1)
    )
    other = make_job(organisation, source_name="b.csv")
    staging_finished.send(sender=Job, job=other, size=3 * 10**9, started=start, finished=start)
    assert LedgerEntry.objects.get(job=other).amount == Decimal("0.0600")


def card_form(starts, rate="9.00") -> dict:
    return {
        "rate_per_gpu_hour": rate,
        "rate_per_staged_gb": "0",
        "currency": "USD",
        "effective_from_0": f"{starts:%Y-%m-%d}",
        "effective_from_1": f"{starts:%H:%M:%S}",
        "note": "",
    }


def test_a_rate_card_in_force_cannot_be_changed_or_deleted_nor_a_new_one_back_dated(running_job, operator):
    """A hold that has started keeps the price it started at, whatever the operator does meanwhile."""
    client = client_for(operator)
    card = RateCard.objects.get()
    assert client.post(f"/admin/billing/ratecard/{card.pk}/change/", card_form(card.effective_from)).status_code == 403
    assert client.post(f"/admin/billing/ratecard/{card.pk}/delete/", {"post": "yes"}).status_code == 403
    bulk = {"action": "delete_selected", "_selected_action": [card.pk], "post": "yes"}
    client.post("/admin/billing/ratecard/", bulk)
    assert RateCard.objects.filter(pk=card.pk, rate_per_gpu_hour=Decimal("3.60")).exists()

    for back_dated in (timezone.now() - timedelta(hours=2), running_job.started_at - timedelta(days=3)):
        response = client.post("/admin/billing/ratecard/add/", card_form(back_dated, rate="50"))
        assert "A rate card cannot start in the past" in response.content.decode()
    assert RateCard.objects.count() == 1

    assert client.post("/admin/billing/ratecard/add/", card_form(timezone.now(), rate="99")).status_code == 302
    assert RateCard.objects.get(rate_per_gpu_hour=99).effective_from > running_job.started_at
    lifecycle.release(running_job)
    assert LedgerEntry.objects.get(job=running_job).rate == Decimal("3.60")


def test_a_rate_card_not_yet_in_force_can_be_corrected_or_withdrawn(operator, rate_card):
    client = client_for(operator)
    tomorrow = timezone.now() + timedelta(days=1)
    future = RateCard.objects.create(rate_per_gpu_hour=Decimal("4.00"), effective_from=tomorrow)
    assert client.post(f"/admin/billing/ratecard/{future.pk}/change/", card_form(tomorrow, "4.20")).status_code == 302
    future.refresh_from_db()
    assert future.rate_per_gpu_hour == Decimal("4.20")
    assert client.post(f"/admin/billing/ratecard/{future.pk}/delete/", {"post": "yes"}).status_code == 302
    assert list(RateCard.objects.all()) == [rate_card]


def test_the_ledger_page_adds_amounts_up_per_currency_and_shows_rates_to_their_last_decimal(
    organisation, partner_client
):

    start = timezone.now() - timedelta(days=2)
    RateCard.objects.create(
        rate_per_gpu_hour=Decimal("3.60"), rate_per_staged_gb=Decimal("0.0050"), effective_from=start
    )
    RateCard.objects.create(
        rate_per_gpu_hour=Decimal("3.30"), rate_per_staged_gb=Decimal("0.0125"), currency="EUR",
        effective_from=start + timedelta(days=1),
    )  # fmt: skip
    for day, size in ((0, 2 * 10**9), (1, 4 * 10**9)):
        job = make_job(organisation)
        began = start + timedelta(days=day, hours=1)
        staging_finished.send(sender=Job, job=job, size=size, started=began, finished=began + timedelta(seconds=5))
    page = partner_client.get("/billing/ledger/").content.decode()
    assert "0.005 USD<small>per GB</small>" in page and "0.0125 EUR<small>per GB</small>" in page
    assert re.search(r"<tfoot>.*0\.05 EUR<br>0\.01 USD</th>", page, re.S), page


def test_operators_are_warned_while_no_rate_card_is_in_force(organisation, online_slots, operator, caplog):
    RateCard.objects.create(rate_per_gpu_hour=Decimal("5"), effective_from=timezone.now() + timedelta(days=1))
    client = client_for(operator)
    assert (
        "No rate card is in force: GPU holds that start now are priced at 0" in client.get("/admin/").content.decode()
    )

    job = make_job(organisation, State.QUEUED)
    assert lifecycle.start_hold(job, online_slots[:1])
    lifecycle.release(job)
    assert LedgerEntry.objects.get(job=job).amount == 0
    assert f"job {job.pk}: no rate card was in force when its hold started; it is recorded at 0" in caplog.text

    RateCard.objects.create(rate_per_gpu_hour=Decimal("0"), note="a free week")
    assert "No rate card is in force" not in client.get("/admin/").content.decode(), "a card at 0 is a choice"


def test_it_refuses_a_negative_rate_on_a_rate_card_in_the_admin(operator):
    client = client_for(operator)
    for field in ("rate_per_gpu_hour", "rate_per_staged_gb"):
        response = client.post("/admin/billing/ratecard/add/", {**card_form(timezone.now()), field: "-0.5"})
        assert response.status_code == 200
        assert "Ensure this value is greater than or equal to 0." in response.content.decode()
    assert not RateCard.objects.exists()
