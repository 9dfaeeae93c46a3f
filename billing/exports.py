"""The ledger exported as CSV and as JSON, written row by row while it downloads: memory stays flat whatever the
ledger's length. The ledger page's exports and the API's stream the same rows (metering.ledger_row); the totals
per currency of the page and the receipts are here too."""

import csv
import json
from collections.abc import Iterator

from django.db.models import QuerySet, Sum
from django.http import StreamingHttpResponse

from billing.metering import ledger_row
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


def csv_lines(entries: QuerySet) -> Iterator[str]:
    writer = csv.DictWriter(_Line(), fieldnames=COLUMNS)
    yield writer.writeheader()
    for entry in entries.iterator(chunk_size=CHUNK):
        yield writer.writerow({name: csv_cell(value) for name, value in ledger_row(entry).items()})


def json_chunks(entries: QuerySet) -> Iterator[str]:
    """`{"entries": [row, ...]}`, one row at a time."""
    yield '{"entries": ['
    separator = ""
    for entry in entries.iterator(chunk_size=CHUNK):
        yield separator + json.dumps(ledger_row(entry))
        separator = ", "
    yield "]}"


def csv_response(entries: QuerySet, filename: str = "ledger.csv") -> StreamingHttpResponse:
    response = StreamingHttpResponse(csv_lines(entries), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def json_response(entries: QuerySet) -> StreamingHttpResponse:
    return StreamingHttpResponse(json_chunks(entries), content_type="application/json")
