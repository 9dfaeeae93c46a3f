"""The ledger's hash chain: an entry's canonical form and its sha256, sealed over the hash of the
organisation's previous entry. Plain functions over an entry's attributes, so the migration that
sealed the entries written before the chain uses the same form as the model and `verify_ledger`."""

import hashlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal

# What an entry says, in the order it is written out. Its own hash is sealed over these.
SEALED_FIELDS = (
    "organisation_id", "job_id", "kind", "gpus", "held_from", "held_to", "seconds", "bytes", "source_kind",
    "gpu_hours", "rate", "currency", "amount", "reason", "recorded_by", "created", "previous_hash",
)  # fmt: skip


def entry_hash(entry) -> str:
    """The sha256 of the entry's canonical form: its sealed fields as compact JSON with sorted keys,
    datetimes in UTC to the microsecond, decimals to their field's places (as the database keeps them)."""
    form = {name: _canonical(entry, name) for name in SEALED_FIELDS}
    text = json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


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
        if entry.hash != entry_hash(entry):
            return count, entry, "its fields no longer match its hash"
        previous = entry
    return count, None, ""
