"""SQLite's REPLACE (and INSERT OR REPLACE, and an upsert) deletes or rewrites the rows a new one clashes
with on a unique, and that deletion fires no DELETE trigger (recursive_triggers is off). A trigger
before every INSERT refuses a row whose id, hash, chain link (organisation, previous hash) or job's
entry of its kind is already written, so no insert reaches the conflict that would replace a row.

PostgreSQL has no REPLACE, and its INSERT ... ON CONFLICT DO UPDATE fires the UPDATE trigger of 0008
on the row it clashes with, which refuses it: nothing to add there.
"""

from django.db import migrations

TABLE = "billing_ledgerentry"

SQLITE = [
    f"""
    CREATE TRIGGER billing_ledger_no_replace BEFORE INSERT ON {TABLE}
    WHEN EXISTS (
        SELECT 1 FROM {TABLE} WHERE id = NEW.id OR hash = NEW.hash
            OR (organisation_id = NEW.organisation_id AND previous_hash = NEW.previous_hash)
            OR (NOT (kind = 'correction') AND job_id = NEW.job_id AND kind = NEW.kind)
    )
    BEGIN SELECT RAISE(ABORT, 'ledger entries are never replaced: a correction is a new entry'); END
    """,
]
SQLITE_REVERSE = ["DROP TRIGGER billing_ledger_no_replace"]


def _run(statements: list[str]):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for sql in statements:
                schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0008_ledger_append_only'),
    ]

    operations = [
        migrations.RunPython(_run(SQLITE), _run(SQLITE_REVERSE)),
    ]
