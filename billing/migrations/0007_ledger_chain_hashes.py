"""Seal the entries written before the chain: per organisation, in the order they were written (pk),
each over the previous one's hash, with a plain sha256 of the canonical form as it stood then. That
form is frozen here, so a later change to billing.chain leaves this migration as it ran; 0011 seals
the chain again under the ledger's key."""

import hashlib
import json
from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

SEALED_FIELDS = (
    "organisation_id", "job_id", "kind", "gpus", "held_from", "held_to", "seconds", "bytes", "source_kind",
    "gpu_hours", "rate", "currency", "amount", "reason", "recorded_by", "created", "previous_hash",
)


def canonical_form(entry) -> dict:
    """The sealed fields as the first form wrote them; a zero kept its sign."""
    return {name: _canonical(entry, name) for name in SEALED_FIELDS}


def sha256_of(form: dict) -> str:
    text = json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(entry, name: str):
    value = getattr(entry, name)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if isinstance(value, Decimal):
        places = entry._meta.get_field(name).decimal_places
        return f"{value.quantize(Decimal(1).scaleb(-places)):f}"
    return value


def seal(apps, schema_editor):
    Entry = apps.get_model("billing", "LedgerEntry")
    previous = {}
    for entry in Entry.objects.order_by("pk").iterator():
        entry.previous_hash = previous.get(entry.organisation_id, "")
        entry.hash = sha256_of(canonical_form(entry))
        Entry.objects.filter(pk=entry.pk).update(previous_hash=entry.previous_hash, hash=entry.hash)
        previous[entry.organisation_id] = entry.hash


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0006_ledger_chain_fields'),
    ]

    operations = [
        migrations.RunPython(seal, migrations.RunPython.noop),
    ]
