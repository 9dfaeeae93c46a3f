"""The ledger's anchor: after every write, a checkpoint of the organisation's head outside the database, and the
head in every receipt, manifest and export, so that verify_ledger names the last entries that whoever can turn
the database's triggers off deleted, even when the checkpoints were cut short too."""

import json
import logging
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from billing import anchor
from billing.metering import record_staging
from billing.models import LedgerEntry
from jobs import tasks
from jobs.models import Job, State
from portal.settings import _ledger_checkpoints
from tests.api.support import api_client, token_for
from tests.billing.test_append_only import verify, written_by_two_at_once
from tests.factories import make_job
from tests.jobs.test_assemble import finishing_job, stored
from tests.support import client_for, ledger_open_for_flush, s3_on_loopback

# Committed: PostgreSQL turns no trigger off while the test's own writes wait on their checks.
pytestmark = pytest.mark.django_db(transaction=True)


def written(organisation, entries: int = 1) -> list[LedgerEntry]:
    """Ended jobs staged for the organisation, each entry written as the stager writes it."""
    start = timezone.now() - timedelta(minutes=1)
    return [
        record_staging(Job, job=make_job(organisation, State.SUCCEEDED), size=10, started=start, finished=start)
        for _ in range(entries)
    ]


def superuser(sql: str, *params) -> None:
    """What a database superuser can do: the ledger's triggers off, for one transaction."""
    with ledger_open_for_flush(), connection.cursor() as cursor:
        cursor.execute(sql, params)


def delete_last(organisation) -> LedgerEntry:
    last = LedgerEntry.objects.filter(organisation=organisation).order_by("-pk").first()
    superuser("DELETE FROM billing_ledgerentry WHERE id = %s", last.pk)
    return last


def when(entry: LedgerEntry) -> str:
    return f"{entry.created:%Y-%m-%d %H:%M:%S} UTC"


def test_it_names_the_last_entry_deleted_with_the_triggers_off(organisation, other_organisation):
    kept = written(organisation, 2)
    written(other_organisation)
    deleted = delete_last(organisation)
    out, refusal = verify()
    assert out.splitlines() == [
        "other-lab: 1 entry, chain intact",
        f"partner-lab: 1 entry after #1 (hash {kept[0].hash[:12]}…) is missing: the checkpoint of {when(deleted)} "
        "says 2 entries, the table has 1",
    ]
    assert refusal == "The ledger does not hold: 1 problem above."


def test_it_names_every_entry_deleted_and_the_organisation_deleted_with_them(organisation, other_organisation):
    last = written(organisation, 2)[-1]
    [gone] = written(other_organisation)
    superuser("DELETE FROM billing_ledgerentry")
    superuser("DELETE FROM jobs_job WHERE organisation_id = %s", other_organisation.pk)
    superuser("DELETE FROM portal_organisation WHERE id = %s", other_organisation.pk)
    assert verify() == (
        f"partner-lab: 2 entries from the start of the chain are missing: the checkpoint of {when(last)} says "
        "2 entries, the table has 0\n"
        f"organisation #{other_organisation.pk}: 1 entry from the start of the chain is missing: the checkpoint of "
        f"{when(gone)} says 1 entry, and the organisation is gone from the database\n",
        "The ledger does not hold: 2 problems above.",
    )


def test_it_names_the_entries_written_in_place_of_those_deleted(organisation):
    written(organisation)
    deleted = delete_last(organisation)
    [replacement] = written(organisation)  # the portal writes on, none the wiser
    assert verify() == (
        f"partner-lab: #1 (hash {replacement.hash[:12]}…) is not the entry the checkpoint of {when(deleted)} names "
        f"(hash {deleted.hash[:12]}…): the entries from #1 on were replaced\n",
        "The ledger does not hold: 1 problem above.",
    )


def api_receipt(job: Job, partner) -> bytes:
    return api_client(token_for(partner)).get(f"/api/v1/jobs/{job.pk}/receipt/").content


# Each document a partner keeps, as they get it: `job` ended and its output is assembled.
DOCUMENTS = {
    "the receipt's page": lambda job, partner: client_for(partner).get(f"/billing/receipts/{job.pk}/").content,
    "the API's receipt": api_receipt,
    "the CSV export": lambda job, partner: client_for(partner).get("/billing/ledger.csv").getvalue(),
    "the JSON export": lambda job, partner: client_for(partner).get("/billing/ledger.json").getvalue(),
    "the output's manifest": lambda job, partner: stored(job, "manifest.json"),
}  # fmt: skip


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_receipt_names_the_entry_deleted_when_the_checkpoints_lost_it_too(
    document, organisation, partner, checkpoints, settings, tmp_path
):
    # The job's output in storage of the test's own: a later test may be handed the same job id.
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {**settings.STORAGES["default"], "OPTIONS": {"location": tmp_path}},
    }
    [first] = written(organisation)
    job = finishing_job(organisation)
    record_staging(Job, job=job, size=10, started=timezone.now(), finished=timezone.now())
    assert tasks.assemble(job.pk)
    job.refresh_from_db()
    kept = tmp_path / "kept"
    kept.write_bytes(DOCUMENTS[document](job, partner))

    deleted = delete_last(organisation)
    for checkpoint in (checkpoints / str(organisation.pk)).glob("000000000002-*"):
        checkpoint.unlink()
    assert verify() == ("partner-lab: 1 entry, chain intact\n", ""), "the checkpoints alone no longer tell"
    assert verify("--receipt", str(kept)) == (
        f"partner-lab: 1 entry after #1 (hash {first.hash[:12]}…) is missing: the receipt's head of {when(deleted)} "
        "says 2 entries, the table has 1\n",
        "The ledger does not hold: 1 problem above.",
    )


def test_an_intact_ledger_holds_to_its_checkpoints_and_receipts(organisation, other_organisation, partner, tmp_path):
    written(organisation, 2)
    receipts = [tmp_path / "receipt.html", tmp_path / "ledger.csv"]
    receipts[0].write_bytes(DOCUMENTS["the receipt's page"](LedgerEntry.objects.last().job, partner))
    written(organisation)
    written(other_organisation)
    receipts[1].write_bytes(DOCUMENTS["the CSV export"](None, partner))
    options = [option for receipt in receipts for option in ("--receipt", str(receipt))]
    assert verify(*options) == ("other-lab: 1 entry, chain intact\npartner-lab: 3 entries, chain intact\n", "")


def test_it_refuses_a_receipt_whose_head_was_changed_or_that_has_none(organisation, partner, tmp_path):
    written(organisation)
    exported = json.loads(DOCUMENTS["the JSON export"](None, partner))
    exported["ledger_head"]["entries"] = 2
    changed, none = tmp_path / "changed.json", tmp_path / "none.json"
    changed.write_text(json.dumps(exported))
    none.write_text(json.dumps({"entries": exported["entries"]}))
    with pytest.raises(CommandError, match="its ledger head is not sealed under this ledger's key"):
        call_command("verify_ledger", "--receipt", str(changed))
    with pytest.raises(CommandError, match="it holds no ledger head"):
        call_command("verify_ledger", "--receipt", str(none))


def test_an_entry_whose_checkpoint_fails_stands_and_verify_ledger_says_it_is_not_anchored(
    organisation, settings, tmp_path, caplog
):
    [first] = written(organisation)
    working, blocked = settings.STORAGES, tmp_path / "a-file"
    blocked.write_text("")
    settings.STORAGES = {**working, "ledger": {**working["ledger"], "OPTIONS": {"location": blocked / "ledger"}}}
    with caplog.at_level(logging.ERROR, logger="billing.anchor"):
        [second] = written(organisation)
    assert LedgerEntry.objects.filter(pk=second.pk).exists(), "the entry is committed, whatever its checkpoint"
    [logged] = caplog.records
    assert logged.getMessage().startswith("The ledger's checkpoint of partner-lab #2 was not written: ")
    assert logged.exc_info, "with why"

    settings.STORAGES = working
    assert verify() == (
        f"partner-lab: 1 entry after #1 is not anchored: the latest checkpoint, of {when(first)}, says 1 entry, "
        "the table has 2\n",
        "The ledger does not hold: 1 problem above.",
    )
    assert verify("--anchor") == ("partner-lab: 2 entries, chain intact, its head anchored now\n", "")
    written(organisation)
    assert verify() == ("partner-lab: 3 entries, chain intact\n", "")


def test_two_writers_at_once_leave_checkpoints_that_hold(organisation):
    written_by_two_at_once(organisation)
    chain = LedgerEntry.objects.filter(organisation=organisation).order_by("pk").values_list("hash", flat=True)
    listed = sorted((checkpoint.entries, checkpoint.hash) for checkpoint in anchor.checkpoints(organisation.pk))
    assert listed == list(enumerate(chain, 1)), "one checkpoint per entry, each naming it at its place"
    assert verify() == ("partner-lab: 16 entries, chain intact\n", "")


def test_it_keeps_the_checkpoints_in_an_s3_bucket(organisation, settings, monkeypatch):
    with s3_on_loopback() as (endpoint, client):
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.setenv(name, "testing")
        monkeypatch.setenv("E31_S3_ENDPOINT_URL", endpoint)
        client.create_bucket(Bucket="e31-ledger")
        settings.STORAGES = {**settings.STORAGES, "ledger": _ledger_checkpoints("s3://e31-ledger/checkpoints")}
        first, second = written(organisation, 2)
        keys = [item["Key"] for item in client.list_objects_v2(Bucket="e31-ledger")["Contents"]]
        assert [key.rsplit("-", 1)[0] for key in sorted(keys)] == [
            f"checkpoints/{organisation.pk}/000000000001-{first.hash}",
            f"checkpoints/{organisation.pk}/000000000002-{second.hash}",
        ]
        delete_last(organisation)
        assert verify()[0] == (
            f"partner-lab: 1 entry after #1 (hash {first.hash[:12]}…) is missing: the checkpoint of {when(second)} "
            "says 2 entries, the table has 1\n"
        )
