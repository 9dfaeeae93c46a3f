"""The ledger is append-only in the database itself, whatever writes to it: the ORM, raw SQL, a shell.

PostgreSQL: one trigger refuses UPDATE and DELETE of any row, another refuses TRUNCATE (which skips
row triggers). SQLite (which has no TRUNCATE): triggers refuse UPDATE and DELETE. Each refusal is an
integrity error that says what was refused. INSERT stays open: the chain's hashes (billing.chain),
checked by `manage.py verify_ledger`, catch an entry written behind the ORM's back.

The triggers have no way around them for the application: no setting, role or flag they honour. Only
the test suite must empty the ledger, when it flushes the database between transactional tests; its
flush (tests/conftest.py) does so inside one transaction that first disables these triggers
(PostgreSQL) or drops them and creates them again from their stored definitions (SQLite). DDL is
transactional on both, so no other connection ever sees the ledger without them. A production
deployment could only do the same as the tables' owner, by DDL, which verify_ledger reports.

On SQLite a later migration that remakes this table (SQLite's way of altering a column) drops its
triggers with it: such a migration creates them again; verify_ledger says when they are missing.
"""

from django.db import migrations, models

TABLE = "billing_ledgerentry"

POSTGRESQL = [
    """
    CREATE FUNCTION billing_ledger_refuse_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION USING
            ERRCODE = 'restrict_violation',
            MESSAGE = 'ledger entries are never '
                || CASE TG_OP WHEN 'UPDATE' THEN 'updated' WHEN 'DELETE' THEN 'deleted' ELSE 'truncated' END
                || ': a correction is a new entry';
    END
    $$
    """,
    f"""
    CREATE TRIGGER billing_ledger_no_update_or_delete BEFORE UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION billing_ledger_refuse_rewrite()
    """,
    f"""
    CREATE TRIGGER billing_ledger_no_truncate BEFORE TRUNCATE ON {TABLE}
    FOR EACH STATEMENT EXECUTE FUNCTION billing_ledger_refuse_rewrite()
    """,
]
POSTGRESQL_REVERSE = [
    f"DROP TRIGGER billing_ledger_no_truncate ON {TABLE}",
    f"DROP TRIGGER billing_ledger_no_update_or_delete ON {TABLE}",
    "DROP FUNCTION billing_ledger_refuse_rewrite()",
]
SQLITE = [
    f"""
    CREATE TRIGGER billing_ledger_no_update BEFORE UPDATE ON {TABLE}
    BEGIN SELECT RAISE(ABORT, 'ledger entries are never updated: a correction is a new entry'); END
    """,
    f"""
    CREATE TRIGGER billing_ledger_no_delete BEFORE DELETE ON {TABLE}
    BEGIN SELECT RAISE(ABORT, 'ledger entries are never deleted: a correction is a new entry'); END
    """,
]
SQLITE_REVERSE = ["DROP TRIGGER billing_ledger_no_delete", "DROP TRIGGER billing_ledger_no_update"]


def _run(statements: dict):
    def run(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        if vendor not in statements:
            raise RuntimeError(f"The ledger's triggers are written for PostgreSQL and SQLite, not {vendor}.")
        for sql in statements[vendor]:
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0007_ledger_chain_hashes'),
    ]

    operations = [
        migrations.AlterField(
            model_name='ledgerentry',
            name='hash',
            field=models.CharField(editable=False, help_text='sha256 sealing this entry.', max_length=64, unique=True),
        ),
        migrations.AddConstraint(
            model_name='ledgerentry',
            constraint=models.UniqueConstraint(fields=('organisation', 'previous_hash'), name='one_chain_per_organisation'),
        ),
        migrations.RunPython(
            _run({"postgresql": POSTGRESQL, "sqlite": SQLITE}),
            _run({"postgresql": POSTGRESQL_REVERSE, "sqlite": SQLITE_REVERSE}),
        ),
    ]
