"""The ledger's anchor: each organisation's head, how many entries its chain holds and the last one's hash,
sealed under E31_LEDGER_KEY. The chain's seals catch an entry rewritten or deleted in the middle, but not its
last entries deleted; so the head is kept where the database's superuser cannot reach it: a checkpoint written
after every append commits, to the `ledger` storage (a folder, or an S3 bucket: E31_LEDGER_CHECKPOINTS), and a
copy in every receipt, manifest and export a partner keeps. verify_ledger compares the table with both."""

import hashlib
import hmac
import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import storages

from portal.models import Organisation

log = logging.getLogger(__name__)

# A checkpoint's name holds all that verify_ledger compares, so it lists the checkpoints and reads none:
# <organisation id>/<entries, 12 digits>-<the last entry's hash>-<when that entry was written, UTC>.json
NAME = re.compile(r"(?P<entries>\d{12})-(?P<hash>[0-9a-f]{64})-(?P<at>\d{8}T\d{12}Z)")
NAME_TIME = "%Y%m%dT%H%M%S%fZ"
# The head as a line of text, in a receipt's page and in the CSV export: verify_ledger --receipt finds it there.
LINE = re.compile(
    r"E31 ledger head: (?P<organisation>[-\w]+), (?P<entries>\d+) entr(?:y|ies), last hash (?P<hash>[0-9a-f]{64}|none),"
    r" written (?P<at>[^,\s]+), seal (?P<seal>[0-9a-f]{64})"
)


@dataclass(frozen=True)
class Head:
    """The end of an organisation's chain: its entries counted, the last one's hash and when it was written
    (None for an empty chain). It names a state of the chain, not a moment: the same chain gives the same head."""

    organisation: str
    entries: int
    hash: str
    at: datetime | None

    @property
    def written(self) -> str:
        return self.at.astimezone(UTC).isoformat(timespec="microseconds") if self.at else ""

    @property
    def seal(self) -> str:
        """HMAC-SHA256 under E31_LEDGER_KEY of the head's fields, so a head nobody issued reads as such."""
        form = {"ledger_head": 1, "organisation": self.organisation, "entries": self.entries, "hash": self.hash}
        message = json.dumps({**form, "at": self.written}, sort_keys=True, separators=(",", ":"))
        return hmac.new(settings.E31_LEDGER_KEY, message.encode(), hashlib.sha256).hexdigest()

    def as_json(self) -> dict:
        return {
            "organisation": self.organisation,
            "entries": self.entries,
            "hash": self.hash,
            "at": self.written or None,
            "seal": self.seal,
        }

    @property
    def line(self) -> str:
        counted = f"{self.entries} entr{'y' if self.entries == 1 else 'ies'}"
        return (
            f"E31 ledger head: {self.organisation}, {counted}, last hash {self.hash or 'none'}, "
            f"written {self.written or 'never'}, seal {self.seal}"
        )


@dataclass(frozen=True)
class Checkpoint:
    """A head as its checkpoint's name gives it."""

    entries: int
    hash: str
    at: datetime


def head_of(organisation: Organisation) -> Head:
    """The organisation's head as the table holds it now: what a receipt, a manifest or an export carries."""
    entries = organisation.ledger_entries.order_by("-pk")
    last = entries.first()
    if last is None:
        return Head(organisation.slug, 0, "", None)
    return Head(organisation.slug, entries.filter(pk__lte=last.pk).count(), last.hash, last.created)


def record(organisation_id: int, head: Head) -> None:
    """The checkpoint of the head an append left, once that append has committed. One that cannot be written
    is logged, not raised: the entry is committed and stays, and verify_ledger names it as not anchored until
    a later checkpoint of the organisation (its next entry's, or verify_ledger --anchor) covers it."""
    try:
        anchor(organisation_id, head)
    except Exception:  # whatever the storage raises (OSError, botocore's errors): the committed entry must stand
        log.exception(
            "The ledger's checkpoint of %s #%d was not written: verify_ledger says it is not anchored until a later"
            " checkpoint is (%s)",
            head.organisation,
            head.entries,
            head.line,
        )


def anchor(organisation_id: int, head: Head) -> None:
    """Write the head's checkpoint: a new file, never one written over, named by what it says."""
    name = f"{organisation_id}/{head.entries:012d}-{head.hash}-{head.at.astimezone(UTC):{NAME_TIME}}.json"
    storages["ledger"].save(name, ContentFile(json.dumps(head.as_json(), indent=2).encode()))


def checkpoints(organisation_id: int) -> list[Checkpoint]:
    """Every checkpoint of the organisation's heads, in no order."""
    try:
        _, names = storages["ledger"].listdir(str(organisation_id))
    except FileNotFoundError:  # a folder never written to: on S3 an empty listing says the same
        return []
    found = (NAME.match(name) for name in names)
    return [
        Checkpoint(int(m["entries"]), m["hash"], datetime.strptime(m["at"], NAME_TIME).replace(tzinfo=UTC))
        for m in found
        if m
    ]


def anchored_organisations() -> set[int]:
    """The ids of the organisations with checkpoints, whether or not the database still has them."""
    try:
        folders, _ = storages["ledger"].listdir("")
    except FileNotFoundError:
        return set()
    return {int(folder) for folder in folders if folder.isdigit()}


def read_head(text: str) -> Head:
    """The head a receipt, manifest, export or checkpoint carries: a JSON document's `ledger_head` (a
    checkpoint is one itself), else the head's line in a page or a CSV export. ValueError when it holds
    none, or one not sealed under this ledger's key."""
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict):
        found = document.get("ledger_head", document)
    else:
        match = LINE.search(text)
        found = match and {
            "organisation": match["organisation"],
            "entries": int(match["entries"]),
            "hash": "" if match["hash"] == "none" else match["hash"],
            "at": None if match["at"] == "never" else match["at"],
            "seal": match["seal"],
        }
    try:
        head = Head(found["organisation"], found["entries"], found["hash"], _moment(found["at"]))
        sealed = hmac.compare_digest(head.seal, found["seal"])
    except (KeyError, TypeError):
        raise ValueError("it holds no ledger head") from None
    if not sealed:
        raise ValueError(
            "its ledger head is not sealed under this ledger's key: it was not issued here, or was changed"
        )
    return head


def _moment(written: str | None) -> datetime | None:
    return datetime.fromisoformat(written) if written else None
