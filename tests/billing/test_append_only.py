"""The ledger is append-only at every layer: each route that could rewrite or invent an entry is tried,
through the ORM and around it, and each is refused; what is written behind the ORM's back breaks the
chain, which verify_ledger names."""

import hashlib
import hmac
import io
import json
import shutil
import threading
from datetime import timedelta
from decimal import Decimal
from importlib import import_module

import pytest
from django.core import serializers
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, connections, models, transaction
from django.db.migrations.executor import MigrationExecutor
from django.forms.models import model_to_dict
from django.test import TestCase
from django.utils import timezone

from billing.chain import canonical_form, entry_hash
from billing.metering import record_staging
from billing.models import LedgerEntry, RateCard
from jobs.models import Job
from portal.models import Organisation
from tests.factories import make_job
from tests.support import ledger_open_for_flush

pytestmark = pytest.mark.django_db


def staged_job(organisation, size: int = 10**9) -> LedgerEntry:
    """A job whose staging is on the ledger, written as the stager writes it, its checkpoint too: a test's
    transaction never commits, so what waits on the commit runs here."""
    job = make_job(organisation)
    start = timezone.now() - timedelta(minutes=1)
    with TestCase.captureOnCommitCallbacks(execute=True):
        return record_staging(Job, job=job, size=size, started=start, finished=start + timedelta(seconds=3))


@pytest.fixture
def entry(organisation, rate_card):
    return staged_job(organisation)


def plain(model=LedgerEntry) -> models.QuerySet:
    """A queryset without the ledger's own guards: what code around the ORM's conveniences reaches."""
    return models.QuerySet(model)


def save_changed(entry):
    entry.amount = Decimal(0)
    entry.save()


def save_new(entry):
    fields = model_to_dict(entry, exclude=["id", "hash", "previous_hash"])
    LedgerEntry(**{name + "_id" if name in ("job", "organisation") else name: v for name, v in fields.items()}).save()


def changed(entry) -> LedgerEntry:
    """The entry as read, its amount set to 0 in memory."""
    copy = LedgerEntry.objects.get(pk=entry.pk)
    copy.amount = Decimal(0)
    return copy


def copy_of(entry) -> LedgerEntry:
    """A new entry saying the same as this one, for 0."""
    copy = changed(entry)
    copy.pk = None
    return copy


ORM_ROUTES = {
    "save() of an entry": save_changed,
    "save() of a new entry": save_new,
    "objects.create()": lambda entry: LedgerEntry.objects.create(**{"job": entry.job, "kind": "correction"}),
    "delete() of an entry": lambda entry: entry.delete(),
    "QuerySet.update()": lambda entry: LedgerEntry.objects.filter(pk=entry.pk).update(amount=0),
    "QuerySet.delete()": lambda entry: LedgerEntry.objects.filter(pk=entry.pk).delete(),
    "the base manager's update()": lambda entry: LedgerEntry._base_manager.update(amount=0),
    "the base manager's delete()": lambda entry: LedgerEntry._base_manager.all().delete(),
    "related manager's update()": lambda entry: entry.job.ledger_entries.update(amount=0),
    "bulk_update()": lambda entry: LedgerEntry.objects.bulk_update([changed(entry)], ["amount"]),
    "bulk_create()": lambda entry: LedgerEntry.objects.bulk_create([copy_of(entry)]),
    "bulk_create(update_conflicts=True)": lambda entry: LedgerEntry.objects.bulk_create(
        [copy_of(entry)], update_conflicts=True, unique_fields=["hash"], update_fields=["amount"]
    ),
}


@pytest.mark.parametrize("route", ORM_ROUTES)
def test_it_refuses_every_rewrite_through_the_orm(entry, route):
    before = LedgerEntry.objects.values().get(pk=entry.pk)
    with pytest.raises(TypeError, match=r"never|appended"):
        ORM_ROUTES[route](entry)
    assert list(LedgerEntry.objects.values()) == [before]


def raw(sql: str, *params):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


COLUMNS = (
    "id", "organisation_id", "job_id", "kind", "gpus", "held_from", "held_to", "seconds", "bytes", "source_kind",
    "gpu_hours", "rate", "currency", "amount", "reason", "recorded_by", "created", "previous_hash", "hash",
)  # fmt: skip
# Each unique of the ledger, and what a copy of an entry keeps to clash with it on that one alone.
UNIQUES = {
    "id": {"id"},
    "hash": {"hash"},
    "(organisation, previous_hash)": {"previous_hash"},
    "(job, kind)": {"kind"},
}
# SQLite runs an upsert's insert trigger first, PostgreSQL only the update trigger of the row it clashes with.
UPSERT_REFUSED = "replaced" if connection.vendor == "sqlite" else "updated"


def insert_clashing(verb: str, entry, unique: str, conflict: str = "") -> None:
    """A copy of the entry for 0, inserted with `verb` (INSERT, REPLACE, INSERT OR REPLACE) and a
    `conflict` clause, that clashes with the entry on one unique and is new on the others."""
    kept = UNIQUES[unique]
    fresh = {"kind": "'correction'", "previous_hash": "'" + "a" * 64 + "'", "hash": "'" + "b" * 64 + "'", "amount": "0"}
    columns = [name for name in COLUMNS if name != "id" or name in kept]  # a new id comes from the sequence
    values = [name if name in kept else fresh.get(name, name) for name in columns]
    raw(
        f"{verb} INTO billing_ledgerentry ({', '.join(columns)}) SELECT {', '.join(values)} "
        f"FROM billing_ledgerentry WHERE id = %s {conflict}",
        entry.pk,
    )


# The clause that makes an INSERT rewrite the row it clashes with, per unique (the partial one needs its WHERE).
UPSERTS = {
    "id": "ON CONFLICT (id) DO UPDATE SET amount = 0",
    "hash": "ON CONFLICT (hash) DO UPDATE SET amount = 0",
    "(organisation, previous_hash)": "ON CONFLICT (organisation_id, previous_hash) DO UPDATE SET amount = 0",
    "(job, kind)": "ON CONFLICT (job_id, kind) WHERE NOT (kind = 'correction') DO UPDATE SET amount = 0",
}
UPSERT_ROUTES = {
    f"raw SQL INSERT ... ON CONFLICT {unique} DO UPDATE": (
        UPSERT_REFUSED,
        lambda entry, unique=unique: insert_clashing("INSERT", entry, unique, UPSERTS[unique]),
    )
    for unique in UNIQUES
}
# SQLite's REPLACE deletes the rows a new one clashes with, without their DELETE trigger (recursive
# triggers are off), so a rewrite is one statement away. PostgreSQL has no REPLACE.
REPLACE_ROUTES = {
    f"raw SQL {verb} on the {unique}": (
        "replaced",
        lambda entry, verb=verb, unique=unique: insert_clashing(verb, entry, unique),
    )
    for verb in ("REPLACE", "INSERT OR REPLACE")
    for unique in UNIQUES
}
DATABASE_ROUTES = {
    "a plain QuerySet.update()": ("updated", lambda entry: plain().filter(pk=entry.pk).update(amount=0)),
    "a plain QuerySet.delete()": ("deleted", lambda entry: plain().filter(pk=entry.pk).delete()),
    "a plain bulk_update()": ("updated", lambda entry: plain().bulk_update([changed(entry)], ["amount"])),
    "a plain bulk_create(update_conflicts=True)": (
        UPSERT_REFUSED,
        lambda entry: plain().bulk_create(
            [copy_of(entry)], update_conflicts=True, unique_fields=["hash"], update_fields=["amount"]
        ),
    ),
    "raw SQL UPDATE": (
        "updated",
        lambda entry: raw("UPDATE billing_ledgerentry SET amount = 0 WHERE id = %s", entry.pk),
    ),
    "raw SQL DELETE": ("deleted", lambda entry: raw("DELETE FROM billing_ledgerentry WHERE id = %s", entry.pk)),
    "raw SQL DELETE of every row": ("deleted", lambda entry: raw("DELETE FROM billing_ledgerentry")),
    **UPSERT_ROUTES,
    **(REPLACE_ROUTES if connection.vendor == "sqlite" else {}),
}


@pytest.mark.parametrize("route", DATABASE_ROUTES)
def test_it_refuses_every_rewrite_around_the_orm_in_the_database(entry, route):
    refused, rewrite = DATABASE_ROUTES[route]
    before = LedgerEntry.objects.values().get(pk=entry.pk)
    with pytest.raises(IntegrityError, match=f"ledger entries are never {refused}"), transaction.atomic():
        rewrite(entry)
    assert list(LedgerEntry.objects.values()) == [before]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="TRUNCATE is PostgreSQL's; SQLite has none")
@pytest.mark.django_db(transaction=True)  # committed: PostgreSQL truncates no table with checks still pending
def test_it_refuses_truncate_in_the_database(entry):
    for sql in ("TRUNCATE billing_ledgerentry", "TRUNCATE jobs_job, billing_ledgerentry CASCADE"):
        with pytest.raises(IntegrityError, match="ledger entries are never truncated"), transaction.atomic():
            raw(sql)
    assert LedgerEntry.objects.get() == entry


def verify(*options: str) -> tuple[str, str]:
    """verify_ledger's output, and its one-line refusal ('' when everything holds)."""
    out = io.StringIO()
    try:
        call_command("verify_ledger", *options, stdout=out)
    except CommandError as error:
        return out.getvalue(), str(error)
    return out.getvalue(), ""


INSERT = """
    INSERT INTO billing_ledgerentry (organisation_id, job_id, kind, gpus, held_from, held_to, seconds, bytes,
        source_kind, gpu_hours, rate, currency, amount, reason, recorded_by, created, previous_hash, hash)
    SELECT organisation_id, job_id, 'correction', gpus, held_from, held_to, seconds, bytes, source_kind, gpu_hours,
        rate, currency, %s, '', '', created, %s, %s FROM billing_ledgerentry WHERE id = %s
"""


def test_it_chains_each_organisations_entries_and_verify_ledger_says_they_hold(organisation, other_organisation):
    first, second = staged_job(organisation), staged_job(organisation, size=5)
    elsewhere = staged_job(other_organisation)
    assert (first.previous_hash, second.previous_hash, elsewhere.previous_hash) == ("", first.hash, "")
    assert all(e.hash == entry_hash(LedgerEntry.objects.get(pk=e.pk)) for e in (first, second, elsewhere))
    assert verify() == ("other-lab: 1 entry, chain intact\npartner-lab: 2 entries, chain intact\n", "")


def test_it_names_the_first_entry_written_behind_the_orms_back(entry, other_organisation):
    staged_job(other_organisation)
    raw(INSERT, Decimal(-100), entry.hash, "0" * 64, entry.pk)
    forged = LedgerEntry.objects.get(hash="0" * 64)
    raw(INSERT, Decimal(-5), forged.hash, "1" * 64, entry.pk)
    out, refusal = verify()
    assert f"partner-lab: broken at entry {forged.pk} (job {entry.job_id}, correction, " in out
    assert out.splitlines()[1].endswith("its fields no longer match its hash"), "the first of the two is named"
    assert "other-lab: 1 entry, chain intact" in out
    assert refusal == "The ledger does not hold: 1 problem above."


def test_it_names_an_entry_not_chained_to_the_one_before(entry):
    later = staged_job(entry.organisation)
    forged = LedgerEntry.objects.get(pk=later.pk)
    forged.kind, forged.amount, forged.previous_hash = "correction", Decimal("-1.0000"), "f" * 64
    raw(INSERT, forged.amount, forged.previous_hash, entry_hash(forged), later.pk)  # sealed, but over a wrong link
    forged = LedgerEntry.objects.get(previous_hash="f" * 64)
    out, refusal = verify()
    assert out.rstrip().endswith(
        f"broken at entry {forged.pk} (job {later.job_id}, correction, {later.held_to:%Y-%m-%d %H:%M:%S}): "
        f"it is not chained to the entry before it (entry {later.pk})"
    )
    assert refusal


REFUSE = "SELECT RAISE(ABORT, 'ledger entries are never updated: a correction is a new entry');"
# Ways to leave a trigger in place, by name, that refuses nothing: what verify_ledger must see through.
WEAKENED = {
    "postgresql": {
        "dropped": ("trigger billing_ledger_no_truncate missing", "DROP TRIGGER billing_ledger_no_truncate ON {t}"),
        "disabled": (
            "trigger billing_ledger_no_truncate disabled",
            "ALTER TABLE {t} DISABLE TRIGGER billing_ledger_no_truncate",
        ),
        "enabled for replication only": (
            "trigger billing_ledger_no_update_or_delete fires only for replication (ENABLE REPLICA)",
            "ALTER TABLE {t} ENABLE REPLICA TRIGGER billing_ledger_no_update_or_delete",
        ),
        "created again WHEN (false)": (
            "trigger billing_ledger_no_update_or_delete is not as its migration created it",
            "DROP TRIGGER billing_ledger_no_update_or_delete ON {t}",
            "CREATE TRIGGER billing_ledger_no_update_or_delete "
            "BEFORE UPDATE OR DELETE ON {t} FOR EACH ROW WHEN (false) EXECUTE FUNCTION billing_ledger_refuse_rewrite()",
        ),
        "its function given a body that refuses nothing": (
            "function billing_ledger_refuse_rewrite is not as its migration created it",
            "CREATE OR REPLACE FUNCTION billing_ledger_refuse_rewrite() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RETURN COALESCE(NEW, OLD); END $$",
        ),
    },
    "sqlite": {
        "dropped": ("trigger billing_ledger_no_delete missing", "DROP TRIGGER billing_ledger_no_delete"),
        "created again with a body that refuses nothing": (
            "trigger billing_ledger_no_update is not as its migration created it",
            "DROP TRIGGER billing_ledger_no_update",
            "CREATE TRIGGER billing_ledger_no_update BEFORE UPDATE ON {t} BEGIN SELECT 1; END",
        ),
        "created again WHEN 0": (
            "trigger billing_ledger_no_update is not as its migration created it",
            "DROP TRIGGER billing_ledger_no_update",
            f"CREATE TRIGGER billing_ledger_no_update BEFORE UPDATE ON {{t}} WHEN 0 BEGIN {REFUSE} END",
        ),
        "created again for one column": (
            "trigger billing_ledger_no_update is not as its migration created it",
            "DROP TRIGGER billing_ledger_no_update",
            f"CREATE TRIGGER billing_ledger_no_update BEFORE UPDATE OF reason ON {{t}} BEGIN {REFUSE} END",
        ),
    },
}[connection.vendor]


@pytest.mark.parametrize("weakened", WEAKENED)
@pytest.mark.django_db(transaction=True)  # committed: PostgreSQL alters no table with checks still pending
def test_it_says_when_a_trigger_no_longer_refuses_rewrites(entry, weakened):
    problem, *statements = WEAKENED[weakened]
    with transaction.atomic():
        for sql in statements:
            raw(sql.format(t="billing_ledgerentry"))
        out, refusal = verify()
        transaction.set_rollback(True)
    assert out.splitlines() == [
        f"the database does not refuse rewrites: {problem}",
        "partner-lab: 1 entry, chain intact",
    ]
    assert refusal == "The ledger does not hold: 1 problem above."
    assert verify() == ("partner-lab: 1 entry, chain intact\n", "")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite's triggers are always enabled")
@pytest.mark.django_db(transaction=True)
def test_it_takes_a_trigger_enabled_always(entry):
    with transaction.atomic():
        raw("ALTER TABLE billing_ledgerentry ENABLE ALWAYS TRIGGER billing_ledger_no_update_or_delete")
        assert verify() == ("partner-lab: 1 entry, chain intact\n", "")
        transaction.set_rollback(True)


def written_by_two_at_once(organisation, count: int = 16) -> None:
    """`count` staging entries of the organisation's, written by two threads (two connections) started together."""
    jobs = [make_job(organisation) for _ in range(count)]
    start = timezone.now()
    together = threading.Barrier(2)

    def write(mine):
        try:
            together.wait()
            for job in mine:
                record_staging(Job, job=job, size=1, started=start, finished=start)
        finally:
            connections.close_all()

    writers = [threading.Thread(target=write, args=(jobs[i::2],)) for i in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()


@pytest.mark.django_db(transaction=True)
def test_it_keeps_one_chain_for_two_writers_at_once(organisation, rate_card):
    written_by_two_at_once(organisation)
    assert LedgerEntry.objects.count() == 16
    assert verify() == ("partner-lab: 16 entries, chain intact\n", "")


@pytest.mark.django_db(transaction=True)
def test_it_lets_the_tests_flush_empty_the_ledger_and_leaves_it_guarded(entry, checkpoints):
    with ledger_open_for_flush():
        call_command("flush", verbosity=0, interactive=False)
    assert not LedgerEntry.objects.exists()
    shutil.rmtree(checkpoints)  # the emptied ledger's checkpoints, which would rightly say it lost its entries
    staged_job(Organisation.objects.create(name="A", slug="a"))
    with pytest.raises(IntegrityError, match="never deleted"), transaction.atomic():
        raw("DELETE FROM billing_ledgerentry")
    assert verify() == ("a: 1 entry, chain intact\n", "")


@pytest.mark.django_db(transaction=True)
def test_it_seals_the_entries_written_before_the_chain_in_the_migration(organisation, other_organisation):
    executor = MigrationExecutor(connection)
    executor.migrate([("billing", "0005_retention_policy")])
    old = executor.loader.project_state([("billing", "0005_retention_policy")]).apps
    Entry, now = old.get_model("billing", "LedgerEntry"), timezone.now()
    for org in (organisation, other_organisation, organisation):  # only billing went back: today's jobs table
        job = make_job(org)
        Entry.objects.create(
            organisation_id=org.pk, job_id=job.pk, kind="hold", gpus=1, held_from=now, held_to=now, seconds=1,
            gpu_hours=Decimal("0.000278"), rate=Decimal("3.6"), currency="USD", amount=Decimal("0.001"),
        )  # fmt: skip

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    first, elsewhere, second = LedgerEntry.objects.order_by("pk")
    assert (first.previous_hash, second.previous_hash, elsewhere.previous_hash) == ("", first.hash, "")
    assert verify("--anchor") == (
        "other-lab: 1 entry, chain intact, its head anchored now\n"
        "partner-lab: 2 entries, chain intact, its head anchored now\n",
        "",
    ), "entries written before the ledger had checkpoints are anchored once, after the upgrade"
    assert verify() == ("other-lab: 1 entry, chain intact\npartner-lab: 2 entries, chain intact\n", "")
    with pytest.raises(IntegrityError, match="never updated"), transaction.atomic():
        raw("UPDATE billing_ledgerentry SET amount = 0")


def test_it_seals_a_zero_priced_at_a_negative_rate_as_it_reads_back(organisation):
    """0 × a negative rate is -0, which the database keeps as 0: the seal must not tell them apart."""
    RateCard.objects.create(
        rate_per_gpu_hour=Decimal(1), rate_per_staged_gb=Decimal(-1), effective_from=timezone.now() - timedelta(days=1)
    )  # written past the validators, as a card from before they refused it
    entry = staged_job(organisation, size=0)
    assert entry.amount.is_zero() and entry.amount.is_signed()
    assert verify() == ("partner-lab: 1 entry, chain intact\n", "")


def forged_fixture(entry) -> str:
    """The entry serialised as a fixture, changed into a new entry of its own."""
    [fields] = json.loads(serializers.serialize("json", [entry]))
    fields["pk"] = None
    fields["fields"].update(kind="correction", amount="-100.0000", hash="0" * 64, previous_hash=entry.hash)
    return json.dumps([fields])


def test_it_refuses_an_entry_deserialised_past_append(entry):
    [forged] = serializers.deserialize("json", forged_fixture(entry))
    with pytest.raises(TypeError, match=r"appended through LedgerEntry\.objects\.append"):
        forged.save()
    assert list(LedgerEntry.objects.all()) == [entry]


def test_it_refuses_an_entry_loaded_from_a_fixture(entry, tmp_path):
    fixture = tmp_path / "forged.json"
    fixture.write_text(forged_fixture(entry))
    with pytest.raises(TypeError, match=r"appended through LedgerEntry\.objects\.append"):
        call_command("loaddata", str(fixture), verbosity=0)
    assert list(LedgerEntry.objects.all()) == [entry]


def plain_sha256(entry) -> str:
    return hashlib.sha256(canonical_form(entry).encode()).hexdigest()


def another_key(entry) -> str:
    return hmac.new(b"k" * 32, canonical_form(entry).encode(), hashlib.sha256).hexdigest()


@pytest.mark.parametrize("seal", [plain_sha256, another_key])
def test_it_names_an_entry_sealed_without_the_ledgers_key(entry, seal):
    """Whoever can write to the database can chain an entry rightly, but cannot seal it without the key."""
    forged = LedgerEntry.objects.get(pk=entry.pk)
    forged.kind, forged.amount, forged.previous_hash = "correction", Decimal("-100.0000"), entry.hash
    raw(INSERT, forged.amount, forged.previous_hash, seal(forged), entry.pk)
    forged = LedgerEntry.objects.get(previous_hash=entry.hash)
    out, refusal = verify()
    assert out.rstrip().endswith(
        f"broken at entry {forged.pk} (job {entry.job_id}, correction, {entry.held_to:%Y-%m-%d %H:%M:%S}): "
        "its fields no longer match its hash"
    )
    assert refusal


def test_it_seals_under_the_ledgers_key(entry, settings):
    assert verify()[1] == ""
    settings.E31_LEDGER_KEY = b"k" * 32
    out, refusal = verify()
    assert f"partner-lab: broken at entry {entry.pk} " in out and refusal


FIRST_FORM = import_module("billing.migrations.0007_ledger_chain_hashes")


@pytest.mark.django_db(transaction=True)
def test_it_seals_again_under_the_key_only_the_entries_the_old_seals_vouch_for(organisation, other_organisation):
    before = [("billing", "0010_rate_card_not_negative")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    Entry, now = executor.loader.project_state(before).apps.get_model("billing", "LedgerEntry"), timezone.now()
    previous = {}

    def write(org, amount: str, sealed_as: str | None = None):
        """An entry sealed and chained as the code before the key did, its amount sealed as given."""
        job = make_job(org)
        entry = Entry(
            organisation_id=org.pk, job_id=job.pk, kind="staging", gpus=0, held_from=now, held_to=now, seconds=1,
            gpu_hours=Decimal(0), rate=Decimal(-1), currency="USD", amount=Decimal(sealed_as or amount),
            previous_hash=previous.get(org.pk, ""),
        )  # fmt: skip
        entry.hash = FIRST_FORM.sha256_of(FIRST_FORM.canonical_form(entry))
        entry.amount = Decimal(amount)
        entry.save()
        previous[org.pk] = entry.hash
        return entry

    write(organisation, "1"), write(organisation, "-0"), write(organisation, "2")
    write(other_organisation, "1")
    rewritten = write(other_organisation, "5", sealed_as="3")
    write(other_organisation, "4")

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert verify("--anchor")[0].splitlines() == [
        f"other-lab: broken at entry {rewritten.pk} (job {rewritten.job_id}, staging, {now:%Y-%m-%d %H:%M:%S}): "
        f"it is not chained to the entry before it (entry {rewritten.pk - 1})",
        "partner-lab: 3 entries, chain intact, its head anchored now",
    ], "the old seals vouched for partner-lab's chain and for other-lab's up to the rewritten entry"
    assert LedgerEntry.objects.get(pk=rewritten.pk).hash == rewritten.hash, "the rewritten entry keeps its old seal"
    with pytest.raises(IntegrityError, match="never updated"), transaction.atomic():
        raw("UPDATE billing_ledgerentry SET amount = 0")
