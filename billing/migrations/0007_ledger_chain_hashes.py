"""Seal the entries written before the chain: per organisation, in the order they were written (pk),
each over the previous one's hash, in the canonical form of billing.chain."""

from django.db import migrations

from billing.chain import entry_hash


def seal(apps, schema_editor):
    Entry = apps.get_model("billing", "LedgerEntry")
    previous = {}
    for entry in Entry.objects.order_by("pk").iterator():
        entry.previous_hash = previous.get(entry.organisation_id, "")
        entry.hash = entry_hash(entry)
        Entry.objects.filter(pk=entry.pk).update(previous_hash=entry.previous_hash, hash=entry.hash)
        previous[entry.organisation_id] = entry.hash


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0006_ledger_chain_fields'),
    ]

    operations = [
        migrations.RunPython(seal, migrations.RunPython.noop),
    ]
