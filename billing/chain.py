"""The ledger's chain: an entry's canonical form and its seal, an HMAC-SHA256 keyed by E31_LEDGER_KEY
over that form, which includes the hash of the organisation's previous entry. Without the key nobody
can seal an entry verify_ledger accepts, whatever they can write to the database. Plain functions over
an entry's attributes, shared by the model and `verify_ledger`; the migrations that sealed entries keep
frozen copies of the form they used (0007, 0011)."""

import hashlib
import hmac
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings

# The canonical form's version, written into it: a later form seals differently, and says so.
VERSION = 2

# What an entry says, in the order it is written out. Its own hash is sealed over these.
SEALED_FIELDS = (
    "organisation_id", "job_id", "kind", "gpus", "held_from", "held_to", "seconds", "bytes", "source_kind",
    "gpu_hours", "rate", "currency", "amount", "reason", "recorded_by", "created", "previous_hash",
)  # fmt: skip


def canonical_form(entry) -> str:
    """The entry's sealed fields and the form's version as compact JSON with sorted keys, datetimes in
    UTC to the microsecond, decimals to their field's places (as the database keeps them)."""
    form = {"v": VERSION, **{name: _canonical(entry, name) for name in SEALED_FIELDS}}
    return json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def entry_hash(entry) -> str:
    """The entry's seal: HMAC-SHA256 of its canonical form under E31_LEDGER_KEY, in hex."""
    return hmac.new(settings.E31_LEDGER_KEY, canonical_form(entry).encode(), hashlib.sha256).hexdigest()


def _canonical(entry, name: str):
    value = getattr(entry, name)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if isinstance(value, Decimal):
        places = entry._meta.get_field(name).decimal_places
        # A zero is plain 0: 0 times a negative rate is -0, which the database keeps, and reads back, as 0.
        return f"{(value if value else Decimal(0)).quantize(Decimal(1).scaleb(-places)):f}"
    return value


def first_break(entries: Iterable) -> tuple[int, object | None, str]:
    """Walk one organisation's entries in the order they were written: how many were read, and the
    first whose fields no longer match its hash or that is not chained to the entry before it (None
    when the chain holds), with why."""
    previous, count = None, 0
    for entry in entries:
        count += 1
        expected = previous.hash if previous else ""
        if entry.previous_hash != expected:
            before = f"entry {previous.pk}" if previous else "the start of the ledger"
            return count, entry, f"it is not chained to the entry before it ({before})"
        if not hmac.compare_digest(entry.hash, entry_hash(entry)):
            return count, entry, "its fields no longer match its hash"
        previous = entry
    return count, None, ""
