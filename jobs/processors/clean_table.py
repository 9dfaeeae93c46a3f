"""clean-table: a raw table made clean and typed, record by record.

Strings are trimmed and normalised to NFC, empty strings become nulls. While staging, each column
takes the narrowest type (bool, int, float, ISO date, ISO datetime, else string) that at least
`type_threshold` of its non-empty values fit; a record holding a value that does not fit its
column's type is rejected with the column and the value named.
"""

import json
import re
import unicodedata
from collections import Counter
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from jobs.processors.base import Batch, Context, Param, ParamError, Processor, Record, Scanner, data_column

TYPES = ("bool", "int", "float", "date", "datetime", "string")
TYPE_NAMES = {
    "bool": "a bool (true or false)",
    "int": "an int",
    "float": "a float",
    "date": "an ISO date",
    "datetime": "an ISO datetime",
    "string": "text",
}
# Which kinds of value each type accepts; a column takes the first type its values fit.
ACCEPTS = {
    "bool": ("bool",),
    "int": ("int",),
    "float": ("int", "float"),
    "date": ("date",),
    "datetime": ("date", "datetime", "datetime_tz"),
}
INT64 = (-(2**63), 2**63 - 1)
# ASCII digits only, written once for Python (matched from the start, to the very end) and for
# pyarrow's RE2 (where $ is the very end), so both read a number alike.
INT_PATTERN = r"^[+-]?[0-9]+$"
FLOAT_PATTERN = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"
DATE_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
DATETIME_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}"
AWARE_PATTERN = r"(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)$"
NUMERIC_STARTS = pa.array(list("+-.0123456789"))
INT, FLOAT, DATE, DATETIME = (
    re.compile(pattern.replace("$", r"\Z"), re.ASCII)
    for pattern in (INT_PATTERN, FLOAT_PATTERN, DATE_PATTERN, DATETIME_PATTERN)
)
TRUE, FALSE = frozenset(("true", "yes")), frozenset(("false", "no"))


def clean(value):
    """Trimmed, NFC-normalised text with empty strings as nulls; other JSON values as they are."""
    if type(value) is str:
        value = value.strip()
        if not value:
            return None
        if not value.isascii():
            value = unicodedata.normalize("NFC", value)
    return value


def kind_of(value) -> str:
    """The narrowest kind of a cleaned, non-null value."""
    if type(value) is not str:
        if isinstance(value, bool):
            return "bool"
        if isinstance(value, int):
            return "int" if INT64[0] <= value <= INT64[1] else "string"
        if isinstance(value, float | Decimal):
            return "float"
        if isinstance(value, datetime):  # Parquet's timestamps; a datetime is also a date
            return "datetime_tz" if value.tzinfo else "datetime"
        if isinstance(value, date):
            return "date"
        return "string"
    if INT.match(value):
        try:
            number = int(value)
        except ValueError:  # more digits than Python converts
            return "string"
        return "int" if INT64[0] <= number <= INT64[1] else "string"
    if FLOAT.match(value):
        return "float"
    lowered = value.lower()
    if lowered in TRUE or lowered in FALSE:
        return "bool"
    if DATE.match(value):
        try:
            date.fromisoformat(value)
        except ValueError:
            return "string"
        return "date"
    if DATETIME.match(value):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return "string"
        return "datetime_tz" if parsed.tzinfo else "datetime"
    return "string"


def count_kinds(column: pa.ChunkedArray) -> Counter:
    """The kinds of the non-empty values of a column pyarrow read from CSV, counted without Python
    per value: a column that took a type in this block counts as that type; text is sorted by the
    same patterns `kind_of` uses (date and datetime by their form; the pass checks each value). A
    block pyarrow read as floats counts as floats, whole ones too: it held at least one value that is
    not an int, and the cast to float takes the ints."""
    counts: Counter = Counter()
    kind, valid = column.type, len(column) - column.null_count
    if pa.types.is_integer(kind):
        counts["int"] = valid
    elif pa.types.is_floating(kind):
        counts["float"] = valid  # "2.0" is a float, not an int; once parsed, 2.0 cannot tell which it was
    elif pa.types.is_boolean(kind):
        counts["bool"] = valid
    elif pa.types.is_date(kind):
        counts["date"] = valid
    elif pa.types.is_timestamp(kind):
        counts["datetime_tz" if kind.tz else "datetime"] = valid
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        counts.update(_count_text(column))
    return counts


def _count(mask) -> int:
    return pc.sum(mask).as_py() or 0


def _count_text(column: pa.ChunkedArray) -> Counter:
    text = pc.utf8_trim_whitespace(column)
    text = pc.filter(text, pc.greater(pc.utf8_length(text), 0))
    counts: Counter = Counter()
    numeric = pc.filter(text, pc.is_in(pc.utf8_slice_codeunits(text, 0, 1), NUMERIC_STARTS))
    if len(numeric):
        is_int = pc.and_(pc.match_substring_regex(numeric, INT_PATTERN), pc.less_equal(pc.utf8_length(numeric), 19))
        counts["int"] = _count(is_int)
        rest = pc.filter(numeric, pc.invert(is_int))
        is_float = pc.match_substring_regex(rest, FLOAT_PATTERN)
        counts["float"] = _count(is_float)
        rest = pc.filter(rest, pc.invert(is_float))
        counts["date"] = _count(pc.match_substring_regex(rest, DATE_PATTERN))
        stamps = pc.filter(rest, pc.match_substring_regex(rest, DATETIME_PATTERN))
        aware = _count(pc.match_substring_regex(stamps, AWARE_PATTERN))
        counts.update(datetime_tz=aware, datetime=len(stamps) - aware)
    short = pc.filter(text, pc.less_equal(pc.utf8_length(text), 5))
    counts["bool"] = _count(pc.match_substring_regex(short, r"^(?:true|yes|false|no)$", ignore_case=True))
    counts["string"] = len(text) - sum(counts.values())
    return +counts


def _to_bool(value):
    if isinstance(value, bool):
        return value
    if type(value) is str:
        lowered = value.lower()
        if lowered in TRUE:
            return True
        if lowered in FALSE:
            return False
    raise ValueError


def _to_int(value):
    if (type(value) is str and INT.match(value)) or (isinstance(value, float) and value.is_integer()):
        value = int(value)
    if type(value) is int and INT64[0] <= value <= INT64[1]:
        return value
    raise ValueError


def _to_float(value):
    if type(value) is str and FLOAT.match(value):
        return float(value)
    if type(value) in (int, float, Decimal):
        return float(value)
    raise ValueError


def _to_date(value):
    if type(value) is str and DATE.match(value):
        return date.fromisoformat(value)
    if type(value) is date:
        return value
    raise ValueError


def _to_datetime(value, aware: bool):
    if type(value) is date:
        value = datetime(value.year, value.month, value.day)
    if type(value) is not str and not isinstance(value, datetime):
        raise ValueError
    parsed = datetime.fromisoformat(value) if type(value) is str else value
    if aware:
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    if parsed.tzinfo:
        raise ValueError
    return parsed


def _to_string(value):
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, date | Decimal):
        return value.isoformat() if isinstance(value, date) else str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def arrow_type(column: dict) -> pa.DataType:
    kind = column["type"]
    if kind == "datetime":
        return pa.timestamp("us", tz="UTC" if column.get("aware") else None)
    return {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "date": pa.date32()}.get(kind, pa.string())


def _caster(column: dict):
    kind = column["type"]
    if kind == "datetime":
        aware = bool(column.get("aware"))
        return lambda value: _to_datetime(value, aware)
    return {"bool": _to_bool, "int": _to_int, "float": _to_float, "date": _to_date, "string": _to_string}[kind]


def parse_types(raw: str) -> dict[str, str]:
    """The `types` parameter, `name:type,name:type`, as a mapping; ParamError names a bad entry."""
    declared = {}
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, kind = entry.rpartition(":")
        if not sep or not name.strip() or kind.strip() not in TYPES:
            raise ParamError(f"types entry {entry!r} must be column:type with type one of {', '.join(TYPES)}")
        declared[name.strip()] = kind.strip()
    return declared


class TypeScanner(Scanner):
    """Counts the kinds of value in each column, to pick each column's type once staging ends."""

    def __init__(self, params: dict):
        self.threshold = params["type_threshold"]
        self.declared = parse_types(params["types"])
        self.by_index: list[Counter] = []
        self.by_name: dict[str, Counter] = {}

    @property
    def needs_every_record(self) -> bool:
        """Whether staging must count every record, or may count a sample of them: a threshold of 1
        asks that every value fits, which no sample can promise."""
        return self.threshold >= 1

    def add(self, value: list | dict) -> None:
        if type(value) is list:
            counters = self.by_index
            while len(counters) < len(value):
                counters.append(Counter())
            for counter, cell in zip(counters, value, strict=False):
                cell = clean(cell)
                if cell is not None:
                    counter[kind_of(cell)] += 1
        else:
            for name, cell in value.items():
                cell = clean(cell)
                if cell is not None:
                    self.by_name.setdefault(name, Counter())[kind_of(cell)] += 1

    def add_table(self, table: pa.Table) -> None:
        """Count a block of CSV records at once: the columns as pyarrow typed them for this block."""
        while len(self.by_index) < table.num_columns:
            self.by_index.append(Counter())
        for counter, column in zip(self.by_index, table.columns, strict=False):
            counter.update(count_kinds(column))

    def plan(self, columns: list[str]) -> dict:
        found = {name: data_column(name, columns) for name in self.declared}
        missing = sorted(name for name, column in found.items() if column is None)
        if missing:
            raise ParamError(f"types names a column the data does not have: {missing[0]!r}")
        declared = {found[name]: kind for name, kind in self.declared.items()}
        planned = []
        for index, name in enumerate(columns):
            if self.by_name:
                counts = self.by_name.get(name, Counter())
            else:
                counts = self.by_index[index] if index < len(self.by_index) else Counter()
            kind = declared.get(name) or self._infer(counts)
            column = {"name": name, "type": kind, "values": sum(counts.values())}
            if kind == "datetime":
                column["aware"] = counts["datetime_tz"] > 0
            planned.append(column)
        return {"columns": planned, "type_threshold": self.threshold}

    def _infer(self, counts: Counter) -> str:
        total = sum(counts.values())
        if not total:
            return "string"
        for kind, accepted in ACCEPTS.items():
            if sum(counts[k] for k in accepted) >= self.threshold * total:
                return kind
        return "string"


class CleanTable(Processor):
    name = "clean-table"
    title = "Clean a table"
    description = (
        "Trims whitespace, normalises Unicode, turns empty strings into nulls, infers each column's type "
        "and casts every record. Output: a typed Parquet table, and the rejected records with the reason."
    )
    version = "1"
    input_formats = ("csv", "jsonl", "parquet")
    params = (
        Param(
            "type_threshold",
            float,
            0.99,
            "Share of a column's non-empty values that must fit a type for the column to take it; "
            "records with values that do not fit are rejected.",
            minimum=0.5,
            maximum=1.0,
        ),
        Param("types", str, "", "Column types to use instead of inferring them, as name:type,name:type."),
    )

    def validate_params(self, raw):
        params = super().validate_params(raw)
        parse_types(params["types"])
        return params

    def scanner(self, params: dict) -> TypeScanner:
        return TypeScanner(params)

    def output_schema(self, context: Context) -> pa.Schema:
        return pa.schema([(column["name"], arrow_type(column)) for column in context.plan["columns"]])

    def process_batch(self, records: list[Record], context: Context) -> Batch:
        columns = context.plan["columns"]
        if context.layout["format"] == "csv":
            values = [[record.value[i] for record in records] for i in range(len(columns))]
        else:
            values = [[record.value.get(column["name"]) for record in records] for column in columns]
        reasons: dict[int, str] = {}
        cast_columns = []
        for column, cells in zip(columns, values, strict=True):
            cast, out = _caster(column), []
            append = out.append
            for row, cell in enumerate(cells):
                cell = clean(cell)
                if cell is None:
                    append(None)
                    continue
                try:
                    append(cast(cell))
                except (ValueError, OverflowError):
                    reasons.setdefault(row, f"column {column['name']!r}: {cell!r} is not {TYPE_NAMES[column['type']]}")
                    append(None)
            cast_columns.append(out)
        keep = [row for row in range(len(records)) if row not in reasons] if reasons else range(len(records))
        if reasons:
            cast_columns = [[cells[row] for row in keep] for cells in cast_columns]
        schema = self.output_schema(context)
        table = pa.table(
            [pa.array(cells, type=field.type) for cells, field in zip(cast_columns, schema, strict=True)],
            schema=schema,
        )
        return Batch(
            table=table,
            kept=[records[row].position for row in keep],
            rejects=[(records[row], reason) for row, reason in sorted(reasons.items())],
        )
