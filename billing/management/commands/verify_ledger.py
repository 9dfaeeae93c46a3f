"""`manage.py verify_ledger`: recompute every organisation's chain of keyed seals and name its first
broken entry, one line per organisation; and check that the database's triggers still guard the
ledger, each present, enabled and as its migration created it. Exit 0 when everything holds;
otherwise a one-line summary and exit 1."""

from importlib import import_module

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from billing.chain import first_break
from billing.models import LedgerEntry
from portal.models import Organisation

TABLE = LedgerEntry._meta.db_table
GUARDS = import_module("billing.migrations.0008_ledger_append_only")
NO_REPLACE = import_module("billing.migrations.0009_ledger_no_replace")

# SQLite keeps each trigger's CREATE statement as it was written: the migrations' own text.
SQLITE_TRIGGERS = {sql.split()[2]: sql.strip() for sql in GUARDS.SQLITE + NO_REPLACE.SQLITE}
# PostgreSQL writes a trigger back in its own words (pg_get_triggerdef): 0008's two, as it writes them.
POSTGRESQL_TRIGGERS = {
    "billing_ledger_no_update_or_delete": (
        "CREATE TRIGGER billing_ledger_no_update_or_delete BEFORE DELETE OR UPDATE ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION billing_ledger_refuse_rewrite()"
    ),
    "billing_ledger_no_truncate": (
        "CREATE TRIGGER billing_ledger_no_truncate BEFORE TRUNCATE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION billing_ledger_refuse_rewrite()"
    ),
}
# The function's body as 0008 wrote it between its $$ quotes, which PostgreSQL keeps as it is (prosrc).
POSTGRESQL_FUNCTION = ("billing_ledger_refuse_rewrite", GUARDS.POSTGRESQL[0].split("$$")[1])
# The table's triggers, and the table's name as pg_get_triggerdef writes it (with its schema).
POSTGRESQL_TRIGGERS_STORED = """
    SELECT t.tgname, t.tgenabled, pg_get_triggerdef(t.oid), quote_ident(n.nspname) || '.' || quote_ident(c.relname)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_trigger t ON t.tgrelid = c.oid AND NOT t.tgisinternal
    WHERE c.oid = %s::regclass
"""
# tgenabled: the trigger fires in ordinary sessions ('O', origin) or always ('A').
FIRES = {"D": "disabled", "R": "fires only for replication (ENABLE REPLICA)"}


class Command(BaseCommand):
    help = "Recompute the ledger's hash chains and name the first broken entry of each organisation."

    def handle(self, *args, **options) -> None:
        problems = self.check_triggers()
        for organisation in Organisation.objects.order_by("slug"):
            entries = LedgerEntry.objects.filter(organisation=organisation).order_by("pk").iterator()
            count, broken, why = first_break(entries)
            if broken is None:
                self.stdout.write(f"{organisation.slug}: {count} entr{'y' if count == 1 else 'ies'}, chain intact")
                continue
            problems += 1
            self.stdout.write(
                f"{organisation.slug}: broken at entry {broken.pk} (job {broken.job_id}, {broken.kind}, "
                f"{broken.held_to:%Y-%m-%d %H:%M:%S}): {why}"
            )
        if problems:
            raise CommandError(f"The ledger does not hold: {problems} problem{'s' if problems != 1 else ''} above.")

    def check_triggers(self) -> int:
        """How many of the ledger's guards are missing, not firing, or not as their migration created
        them; one line for each."""
        with connection.cursor() as cursor:
            found = postgresql_guards(cursor) if connection.vendor == "postgresql" else sqlite_guards(cursor)
        for guard, problem in found:
            self.stdout.write(f"the database does not refuse rewrites: {guard} {problem}")
        return len(found)


def sqlite_guards(cursor) -> list[tuple[str, str]]:
    cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [TABLE])
    stored = dict(cursor.fetchall())
    return [
        (f"trigger {name}", "missing" if name not in stored else "is not as its migration created it")
        for name, sql in SQLITE_TRIGGERS.items()
        if stored.get(name) != sql
    ]


def postgresql_guards(cursor) -> list[tuple[str, str]]:
    cursor.execute(POSTGRESQL_TRIGGERS_STORED, [TABLE])
    rows = cursor.fetchall()
    table = rows[0][3]
    stored = {name: (enabled, definition) for name, enabled, definition, _ in rows if name}
    found = []
    for name, definition in POSTGRESQL_TRIGGERS.items():
        enabled, actual = stored.get(name, (None, None))
        if actual is None:
            found.append((f"trigger {name}", "missing"))
        elif actual != definition.format(table=table):
            found.append((f"trigger {name}", "is not as its migration created it"))
        elif enabled in FIRES:
            found.append((f"trigger {name}", FIRES[enabled]))
    function, body = POSTGRESQL_FUNCTION
    cursor.execute("SELECT prosrc FROM pg_proc WHERE oid = to_regproc(%s)", [function])
    stored_body = cursor.fetchone()
    if stored_body is None:
        found.append((f"function {function}", "missing"))
    elif stored_body[0] != body:
        found.append((f"function {function}", "is not as its migration created it"))
    return found
