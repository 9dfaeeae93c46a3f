"""`manage.py verify_ledger`: recompute every organisation's chain of keyed seals and name its first
broken entry, one line per organisation; hold each chain to the heads written outside the database
(billing.anchor), its checkpoints' and those of the receipts given with `--receipt`, and name the
entries missing at its end; and check that the database's triggers still guard the ledger, each
present, enabled and as its migration created it. Exit 0 when everything holds; otherwise a one-line
summary and exit 1. `#N` is an organisation's Nth entry; `entry N`, the entry whose id is N."""

from collections.abc import Iterable, Iterator
from importlib import import_module
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from billing import anchor
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
    help = (
        "Recompute the ledger's hash chains and name the first broken entry of each organisation; name the entries "
        "missing at a chain's end, against its checkpoints and the receipts given."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--receipt",
            action="append",
            default=[],
            type=Path,
            metavar="FILE",
            help="a receipt (its page or JSON), a manifest, an export or a checkpoint: its organisation's ledger must "
            "still hold the head it carries (again for more)",
        )
        parser.add_argument(
            "--anchor",
            action="store_true",
            dest="anchor_now",
            help="write a checkpoint of each head no checkpoint names, where nothing else is wrong: once after an "
            "upgrade, and after a checkpoint that could not be written",
        )

    def handle(self, *args, receipt: list[Path], anchor_now: bool, **options) -> None:
        receipts = read_receipts(receipt)
        problems = self.check_triggers()
        organisations = list(Organisation.objects.order_by("slug"))
        for organisation in organisations:
            problems += self.check_chain(organisation, receipts.pop(organisation.slug, []), anchor_now)
        problems += self.check_gone({organisation.pk for organisation in organisations}, receipts)
        if problems:
            raise CommandError(f"The ledger does not hold: {problems} problem{'s' if problems != 1 else ''} above.")

    def check_chain(self, organisation: Organisation, receipts: list[anchor.Head], anchor_now: bool) -> int:
        """The organisation's chain walked, then held to its checkpoints and the receipts' heads: how many
        problems, one line for each (or one line saying it holds)."""
        slug, checkpoints = organisation.slug, anchor.checkpoints(organisation.pk)
        marks = [("the checkpoint of", checkpoints)] + [("the receipt's head of", [head]) for head in receipts]
        walk = Walk(LedgerEntry.objects.filter(organisation=organisation).order_by("pk").iterator(), marks)
        count, broken, why = first_break(walk)
        if broken is not None:
            self.stdout.write(
                f"{slug}: broken at entry {broken.pk} (job {broken.job_id}, {broken.kind}, "
                f"{broken.held_to:%Y-%m-%d %H:%M:%S}): {why}"
            )
            return 1
        found = [line for source, heads in marks if (line := walk.missing(slug, count, source, heads))]
        # Listed again if need be: a write that committed while the chain was read anchors itself an instant later.
        anchored = (
            not count or walk.anchored(count, checkpoints) or walk.anchored(count, anchor.checkpoints(organisation.pk))
        )
        if not found and not anchored and anchor_now:
            anchor.anchor(organisation.pk, anchor.head_of(organisation))
            self.stdout.write(f"{slug}: {entries(count)}, chain intact, its head anchored now")
            return 0
        if not found and not anchored:
            found.append(unanchored(slug, count, checkpoints))
        for line in found or [f"{slug}: {entries(count)}, chain intact"]:
            self.stdout.write(line)
        return len(found)

    def check_gone(self, known: set[int], receipts: dict[str, list[anchor.Head]]) -> int:
        """The organisations with checkpoints, or named by a receipt, that the database no longer has."""
        problems = 0
        for pk in sorted(anchor.anchored_organisations() - known):
            latest = max(anchor.checkpoints(pk), key=lambda checkpoint: checkpoint.entries, default=None)
            if latest is None:
                continue
            self.stdout.write(
                f"organisation #{pk}: {entries(latest.entries)} from the start of the chain "
                f"{'is' if latest.entries == 1 else 'are'} missing: the checkpoint of {when(latest)} says "
                f"{entries(latest.entries)}, and the organisation is gone from the database"
            )
            problems += 1
        for slug, heads in receipts.items():
            for head in heads:
                said = f"the receipt's head of {when(head)} says {entries(head.entries)}"
                self.stdout.write(f"{slug}: {said}, and no organisation is {slug}")
                problems += 1
        return problems

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


class Walk:
    """An organisation's entries, passed on as first_break reads them, noting the hash of each entry a head
    names (the head's last) and of the last entry read."""

    def __init__(self, entries: Iterable[LedgerEntry], marks: list[tuple[str, list]]):
        self.entries, self.hashes, self.last = entries, {}, ""
        self.named = {head.entries for _, heads in marks for head in heads}

    def __iter__(self) -> Iterator[LedgerEntry]:
        for position, entry in enumerate(self.entries, 1):
            if position in self.named:
                self.hashes[position] = entry.hash
            self.last = entry.hash
            yield entry

    def missing(self, slug: str, count: int, source: str, heads: list) -> str:
        """What these heads (a source's) say the chain lost: the first entry replaced (another entry in its
        place), else the entries past the table's end; '' when they are all there."""
        replaced = (head for head in heads if head.entries <= count and self.hashes.get(head.entries, "") != head.hash)
        head = min(replaced, key=lambda head: head.entries, default=None)
        if head is not None:
            return (
                f"{slug}: #{head.entries} (hash {short(self.hashes[head.entries])}) is not the entry {source} "
                f"{when(head)} names (hash {short(head.hash)}): the entries from #{head.entries} on were replaced"
            )
        beyond = max((head for head in heads if head.entries > count), key=lambda h: h.entries, default=None)
        if beyond is None:
            return ""
        lost = beyond.entries - count
        after = f"after #{count} (hash {short(self.last)})" if count else "from the start of the chain"
        return (
            f"{slug}: {entries(lost)} {after} {'is' if lost == 1 else 'are'} missing: {source} {when(beyond)} "
            f"says {entries(beyond.entries)}, the table has {count}"
        )

    def anchored(self, count: int, checkpoints: list[anchor.Checkpoint]) -> bool:
        return any(checkpoint.entries == count and checkpoint.hash == self.last for checkpoint in checkpoints)


def unanchored(slug: str, count: int, checkpoints: list[anchor.Checkpoint]) -> str:
    """The entries past the organisation's latest checkpoint: their deletion would go unnoticed."""
    latest = max(checkpoints, key=lambda checkpoint: checkpoint.entries, default=None)
    if latest is None:
        return f"{slug}: {entries(count)} from the start of the chain, none anchored: no checkpoint names them"
    lost = count - latest.entries
    return (
        f"{slug}: {entries(lost)} after #{latest.entries} {'is' if lost == 1 else 'are'} not anchored: the latest "
        f"checkpoint, of {when(latest)}, says {entries(latest.entries)}, the table has {count}"
    )


def read_receipts(paths: list[Path]) -> dict[str, list[anchor.Head]]:
    """The heads the receipts carry, by organisation; a file that holds none, or one not sealed here, stops
    the command."""
    heads: dict[str, list[anchor.Head]] = {}
    for path in paths:
        try:
            head = anchor.read_head(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise CommandError(f"{path}: {error}") from None
        heads.setdefault(head.organisation, []).append(head)
    return heads


def entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


def short(hash_: str) -> str:
    return f"{hash_[:12]}…"


def when(head: anchor.Head | anchor.Checkpoint) -> str:
    """When the head's last entry was written: the time a checkpoint or a receipt is known by."""
    return f"{head.at:%Y-%m-%d %H:%M:%S} UTC" if head.at else "an empty chain"
