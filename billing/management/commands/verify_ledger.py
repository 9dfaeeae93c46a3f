"""`manage.py verify_ledger`: recompute every organisation's hash chain and name its first broken
entry, one line per organisation; and check that the database's triggers still guard the ledger.
Exit 0 when everything holds; otherwise a one-line summary and exit 1."""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from billing.chain import first_break
from billing.models import LedgerEntry
from portal.models import Organisation

# The triggers of migrations billing 0008 and 0009, per database.
TRIGGERS = {
    "postgresql": {"billing_ledger_no_update_or_delete", "billing_ledger_no_truncate"},
    "sqlite": {"billing_ledger_no_update", "billing_ledger_no_delete", "billing_ledger_no_replace"},
}
TRIGGERS_IN_FORCE = {
    "postgresql": (
        "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal AND tgenabled <> 'D'"
    ),
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s",
}


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
        """1 when a trigger of migration 0008 is missing or disabled (it says which), else 0."""
        expected = TRIGGERS[connection.vendor]
        with connection.cursor() as cursor:
            cursor.execute(TRIGGERS_IN_FORCE[connection.vendor], [LedgerEntry._meta.db_table])
            missing = expected - {name for (name,) in cursor.fetchall()}
        if missing:
            self.stdout.write(f"the database does not refuse rewrites: trigger {', '.join(sorted(missing))} missing")
        return int(bool(missing))
