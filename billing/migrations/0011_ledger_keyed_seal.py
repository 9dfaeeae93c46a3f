"""Seal the ledger again under its key, E31_LEDGER_KEY: an HMAC-SHA256 over version 2 of the canonical
form, in place of 0007's plain sha256, which anyone able to write to the database could compute for
an entry they forged or rewrote. Version 2 also writes a zero as plain 0. Both forms are frozen here
(the first as 0007 keeps it), so a later change to billing.chain leaves this migration as it ran.

A re-seal is sound only for what the old seals still vouch for. Per organisation, in the order the
entries were written, each is checked as verify_ledger checked it before: its sha256 and its link to
the entry before. The entries up to the first that fails are sealed again and chained under the key.
From that entry on nothing changes: it keeps its old seal, and verify_ledger goes on naming it, where
a re-seal would have made a rewritten entry look sound. One tolerance: the code sealed a zero it held
as -0 with its sign, which the database kept as 0, so both signs of a zero are tried. What the old
seal could not tell apart from a true entry (one forged with a correct sha256) is sealed with the
rest: the key vouches for what is written from now on, and for the chain as it stood here.

The updates are what the triggers of 0008 refuse, to whoever asks. A migration may lift them where
the portal cannot: it runs as the table's owner (on PostgreSQL, only the owner may disable a trigger;
the portal runs as a role that does not own the table), in one transaction with the updates, and DDL
is transactional on both databases, so no other connection sees the ledger unguarded. PostgreSQL:
the UPDATE trigger is disabled, then enabled; SQLite: the ledger's triggers are dropped, then created
again from their stored SQL, as the tests' flush does.

Going back leaves the keyed seals, which the code before this migration cannot check.
"""

import contextlib
import hashlib
import hmac
import itertools
import json
from datetime import UTC, datetime
from decimal import Decimal
from importlib import import_module

from django.conf import settings
from django.db import migrations, models

TABLE = "billing_ledgerentry"
FIRST_FORM = import_module("billing.migrations.0007_ledger_chain_hashes")

SEALED_FIELDS = (
    "organisation_id", "job_id", "kind", "gpus", "held_from", "held_to", "seconds", "bytes", "source_kind",
    "gpu_hours", "rate", "currency", "amount", "reason", "recorded_by", "created", "previous_hash",
)


def keyed_seal(entry, key: bytes) -> str:
    """HMAC-SHA256 of version 2 of the canonical form."""
    form = {"v": 2, **{name: _canonical(entry, name) for name in SEALED_FIELDS}}
    text = json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _canonical(entry, name: str):
    value = getattr(entry, name)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if isinstance(value, Decimal):
        places = entry._meta.get_field(name).decimal_places
        return f"{(value if value else Decimal(0)).quantize(Decimal(1).scaleb(-places)):f}"
    return value


def sealed_by_first_form(entry) -> bool:
    """Whether the entry's hash is the sha256 of 0007's form of it, each zero with either sign."""
    form = FIRST_FORM.canonical_form(entry)
    zeros = [name for name in SEALED_FIELDS if isinstance(getattr(entry, name), Decimal) and not getattr(entry, name)]
    for signs in itertools.product(("", "-"), repeat=len(zeros)):
        signed = {name: sign + form[name].lstrip("-") for name, sign in zip(zeros, signs)}
        if FIRST_FORM.sha256_of({**form, **signed}) == entry.hash:
            return True
    return False


def intact(entries):
    """The entries up to the first whose old seal or link to the entry before it fails."""
    previous = ""
    for entry in entries:
        if entry.previous_hash != previous or not sealed_by_first_form(entry):
            return
        yield entry
        previous = entry.hash


@contextlib.contextmanager
def ledger_unguarded(schema_editor):
    """The ledger's UPDATE trigger lifted until the block ends, in the migration's transaction."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER billing_ledger_no_update_or_delete", params=None)
        yield
        schema_editor.execute(f"ALTER TABLE {TABLE} ENABLE TRIGGER billing_ledger_no_update_or_delete", params=None)
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [TABLE])
        triggers = cursor.fetchall()
    for name, _ in triggers:
        schema_editor.execute(f'DROP TRIGGER "{name}"', params=None)
    yield
    for _, sql in triggers:
        schema_editor.execute(sql, params=None)


def reseal(apps, schema_editor):
    Entry = apps.get_model("billing", "LedgerEntry")
    organisations = Entry.objects.order_by().values_list("organisation_id", flat=True).distinct()
    with ledger_unguarded(schema_editor):
        for organisation_id in list(organisations):
            chain = list(intact(Entry.objects.filter(organisation_id=organisation_id).order_by("pk")))
            previous = ""
            for entry in chain:
                entry.previous_hash = previous
                entry.hash = keyed_seal(entry, settings.E31_LEDGER_KEY)
                Entry.objects.filter(pk=entry.pk).update(previous_hash=entry.previous_hash, hash=entry.hash)
                previous = entry.hash


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0010_rate_card_not_negative'),
    ]

    operations = [
        migrations.AlterField(
            model_name='ledgerentry',
            name='hash',
            field=models.CharField(editable=False, help_text='HMAC-SHA256 sealing this entry, under E31_LEDGER_KEY.', max_length=64, unique=True),
        ),
        migrations.RunPython(reseal, migrations.RunPython.noop),
    ]
