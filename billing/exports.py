"""The ledger exported as CSV and as JSON, written row by row while it downloads: memory stays flat whatever the
ledger's length. The ledger page's exports and the API's stream the same rows (metering.ledger_row), and the
organisation's ledger head (billing.anchor) with them, whatever the filters keep; the totals per currency of the
page and the receipts are here too."""

import csv
import json
from collections.abc import Iterator

from django.db.models import QuerySet, Sum
from django.http import StreamingHttpResponse

from billing.anchor import head_of
from billing.metering import ledger_row
from portal.models import Organisation
from portal.text import csv_cell

COLUMNS = (
    "job", "kind", "gpus", "held_from", "held_to", "seconds", "gpu_hours",
    "bytes", "source", "rate", "currency", "amount", "reason", "hash", "previous_hash",
)  # fmt: skip
CHUNK = 500


def per_currency(entries: QuerySet) -> QuerySet:
    """The amounts added up, a total per currency: amounts add up within a currency only (a rate card may change it)."""
    return entries.order_by("currency").values("currency").annotate(amount=Sum("amount"))


class _Line:
    """What csv.writer writes to: it hands each line back instead of keeping it."""

    def write(self, line: str) -> str:
        return line


def csv_lines(entries: QuerySet, organisation: Organisation) -> Iterator[str]:
    """A row per entry, then one of kind `head`: the organisation's head, its line in `reason`."""
    head = head_of(organisation)
    writer = csv.DictWriter(_Line(), fieldnames=COLUMNS)
    yield writer.writeheader()
    for entry in entries.iterator(chunk_size=CHUNK):
        yield writer.writerow({name: csv_cell(value) for name, value in ledger_row(entry).items()})
    yield writer.writerow({"kind": "head", "held_to": head.written, "reason": head.line, "hash": head.hash})


def json_chunks(entries: QuerySet, organisation: Organisation) -> Iterator[str]:
    """`{"ledger_head": head, "entries": [row, ...]}`, one row at a time."""
    yield f'{{"ledger_head": {json.dumps(head_of(organisation).as_json())}, "entries": ['
    separator = ""
    for entry in entries.iterator(chunk_size=CHUNK):
        yield separator + json.dumps(ledger_row(entry))
        separator = ", "
    yield "]}"


def csv_response(entries: QuerySet, organisation: Organisation, filename: str = "ledger.csv") -> StreamingHttpResponse:
    response = StreamingHttpResponse(csv_lines(entries, organisation), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def json_response(entries: QuerySet, organisation: Organisation) -> StreamingHttpResponse:
    return StreamingHttpResponse(json_chunks(entries, organisation), content_type="application/json")
