"""column-stats: a summary of each column, reduced batch by batch on the slots and merged at assembly.

Staging reads every record once, as for clean-table: each column takes a type (bool, int, float, ISO
date, ISO datetime, else string; `type_threshold` and `types` as there), and the range of each
numeric column's finite values fixes its histogram's bin edges, so every shard counts into the same
bins. A slot summarises each batch of records into a partial (one row per column); assembly folds
the partials of all shards, in input order, into output.parquet: one row per summarised column.

No record is rejected for its values: a value that does not fit its column's type is counted in
that column's `invalid`. Only records that cannot be read at all are rejected, with their line.

Output schema (one row per column, in the data's order):

- `column` (string), `type` (string: bool, int, float, date, datetime or string)
- `count` (int64): values of the column's type, NaN and infinities included
- `nulls` (int64): missing, null or empty (blank text) values
- `invalid` (int64): values that do not fit the column's type; in no other figure. `count + nulls +
  invalid` is the number of records summarised.
- `invalid_example` (string): the first such value in input order, else null
- `non_finite` (int64): NaN, inf and -inf values of a float column (text "nan", "inf", "infinity"
  in any case and sign, or such JSON/Parquet floats); counted in `count` and the top values only
- `min`, `max` (string): the extremes as text (numbers as Python writes them, dates and datetimes in
  ISO 8601, bools as true/false, text by code point); exact. Null when there is no value.
- `mean`, `std` (float64): of an int or float column's finite values; `std` is the sample standard
  deviation (n - 1). Merged with Chan et al.'s pairwise (count, mean, M2) update. Null otherwise, and
  `std` is null with fewer than two values.
- `distinct` (int64): distinct values, exact; null when the column has more than DISTINCT_CAP.
- `top_values` (list of {value: string, count: int64}): the `top_values` most frequent values, most
  frequent first, ties by value.
- `top_values_exact` (bool): false when more than DISTINCT_CAP distinct values were seen: only that
  many are kept at a time (the most frequent so far), so the counts are then lower bounds.
- `histogram` (list of {low, high: float64, count: int64}): `bins` equal bins between the finite
  minimum and maximum found while staging (one bin when they are equal), each holding low <= x <
  high, the last one also its high; exact. Int and float columns only, else null.
"""

import bisect
import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime

import pyarrow as pa
import pyarrow.compute as pc

from jobs.processors.base import Batch, Context, Param, ParamError, Processor, Record, data_column
from jobs.processors.clean_table import (
    FLOAT_PATTERN,
    CleanTable,
    TypeScanner,
    _caster,
    _count,
    _to_float,
    _to_string,
    clean,
    kind_of,
    parse_types,
)

DISTINCT_CAP = 10_000  # distinct values a column's summary keeps at a time
EXAMPLE_CHARS = 200
NUMERIC = ("int", "float")
NON_FINITE_PATTERN = r"^[+-]?(?:nan|inf|infinity)$"
NON_FINITE = re.compile(NON_FINITE_PATTERN.replace("$", r"\Z"), re.IGNORECASE)
# How a partial's min and max (kept as text) are read back to be compared.
PARSE = {
    "bool": lambda text: text == "true",
    "int": int,
    "float": float,
    "date": date.fromisoformat,
    "datetime": datetime.fromisoformat,
    "string": str,
}
VALUE_COUNT = pa.struct([("value", pa.string()), ("count", pa.int64())])
# What a partial summary and the output both hold of a column, after its name (and the output's type).
COUNTS = [
    ("count", pa.int64()),
    ("nulls", pa.int64()),
    ("invalid", pa.int64()),
    ("invalid_example", pa.string()),
    ("non_finite", pa.int64()),
    ("min", pa.string()),
    ("max", pa.string()),
]
PARTIAL_SCHEMA = pa.schema(
    [
        ("column", pa.string()),
        *COUNTS,
        ("finite", pa.int64()),
        ("mean", pa.float64()),
        ("m2", pa.float64()),
        ("values", pa.list_(VALUE_COUNT)),
        ("values_exact", pa.bool_()),
        ("histogram", pa.list_(pa.int64())),
    ]
)
OUTPUT_SCHEMA = pa.schema(
    [
        ("column", pa.string()),
        ("type", pa.string()),
        *COUNTS,
        ("mean", pa.float64()),
        ("std", pa.float64()),
        ("distinct", pa.int64()),
        ("top_values", pa.list_(VALUE_COUNT)),
        ("top_values_exact", pa.bool_()),
        ("histogram", pa.list_(pa.struct([("low", pa.float64()), ("high", pa.float64()), ("count", pa.int64())]))),
    ]
)


def parse_columns(raw: str) -> list[str]:
    """The `columns` parameter, `name,name`, as a list of names."""
    return [name for name in (part.strip() for part in raw.split(",")) if name]


def bin_edges(low: float, high: float, bins: int) -> list[float]:
    """`bins` equal bins from low to high (one when they are equal), written without overflow."""
    if low == high:
        return [low, high]
    edges = [low * (1 - step / bins) + high * (step / bins) for step in range(bins + 1)]
    edges[0], edges[-1] = low, high
    return edges


def bin_of(edges: list[float], number: float) -> int:
    """The bin holding `number`: low <= x < high, the last bin also holding its high."""
    return min(max(bisect.bisect_right(edges, number) - 1, 0), len(edges) - 2)


def combine_moments(a: tuple[int, float, float], b: tuple[int, float, float]) -> tuple[int, float, float]:
    """(count, mean, M2) of two sets of numbers from each one's (Chan, Golub and LeVeque, 1979)."""
    n_a, mean_a, m2_a = a
    n_b, mean_b, m2_b = b
    if not n_b:
        return a
    if not n_a:
        return b
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


def render(value) -> str:
    """A typed value as the summary writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _to_any_float(value) -> float:
    if type(value) is str and NON_FINITE.match(value):
        return float(value)
    return _to_float(value)


def cast_for(column: dict):
    """clean-table's cast for the column's type; a float column also takes NaN and infinities as text."""
    return _to_any_float if column["type"] == "float" else _caster(column)


@dataclass
class Summary:
    """One column's figures over some records: what a partial row holds, and how two are merged."""

    count: int = 0
    nulls: int = 0
    invalid: int = 0
    invalid_example: str | None = None
    non_finite: int = 0
    low: object = None
    high: object = None
    moments: tuple[int, float, float] = (0, 0.0, 0.0)
    values: Counter = field(default_factory=Counter)
    values_exact: bool = True
    histogram: list[int] | None = None

    @classmethod
    def empty(cls, column: dict) -> "Summary":
        edges = column.get("edges")
        return cls(histogram=[0] * (len(edges) - 1) if edges else None)

    @classmethod
    def of(cls, column: dict, cells: list) -> "Summary":
        """The summary of a column's raw cells."""
        summary, cast, kind = cls.empty(column), cast_for(column), column["type"]
        edges, typed = column.get("edges"), []
        for cell in cells:
            cell = clean(cell)
            if cell is None:
                summary.nulls += 1
                continue
            try:
                typed.append(cast(cell))
            except (ValueError, OverflowError):
                summary.invalid += 1
                if summary.invalid_example is None:
                    summary.invalid_example = _to_string(cell)[:EXAMPLE_CHARS]
        summary.count = len(typed)
        summary.values.update(map(render, typed))
        summary.cap()
        if kind in NUMERIC:
            finite_values = [value for value in typed if math.isfinite(value)]
            summary.non_finite = len(typed) - len(finite_values)
            typed, finite = finite_values, [float(value) for value in finite_values]
            if finite:
                mean = math.fsum(finite) / len(finite)
                summary.moments = (len(finite), mean, math.fsum((number - mean) ** 2 for number in finite))
            if edges:
                for number in finite:
                    summary.histogram[bin_of(edges, number)] += 1
        if typed:
            summary.low, summary.high = min(typed), max(typed)
        return summary

    @classmethod
    def from_row(cls, column: dict, row: dict) -> "Summary":
        parse = PARSE[column["type"]]
        return cls(
            count=row["count"],
            nulls=row["nulls"],
            invalid=row["invalid"],
            invalid_example=row["invalid_example"],
            non_finite=row["non_finite"],
            low=None if row["min"] is None else parse(row["min"]),
            high=None if row["max"] is None else parse(row["max"]),
            moments=(row["finite"], row["mean"] or 0.0, row["m2"] or 0.0),
            values=Counter({item["value"]: item["count"] for item in row["values"]}),
            values_exact=row["values_exact"],
            histogram=row["histogram"],
        )

    def cap(self) -> None:
        """Keep at most DISTINCT_CAP values, the most frequent: the counts are then lower bounds."""
        if len(self.values) > DISTINCT_CAP:
            self.values = Counter(dict(self.values.most_common(DISTINCT_CAP)))
            self.values_exact = False

    def merge(self, other: "Summary") -> None:
        """Fold in the summary of later records."""
        self.count += other.count
        self.nulls += other.nulls
        self.invalid += other.invalid
        if self.invalid_example is None:
            self.invalid_example = other.invalid_example
        self.non_finite += other.non_finite
        if other.low is not None and (self.low is None or other.low < self.low):
            self.low = other.low
        if other.high is not None and (self.high is None or other.high > self.high):
            self.high = other.high
        self.moments = combine_moments(self.moments, other.moments)
        self.values.update(other.values)
        self.values_exact = self.values_exact and other.values_exact
        self.cap()
        if self.histogram is not None and other.histogram is not None:
            self.histogram = [mine + theirs for mine, theirs in zip(self.histogram, other.histogram, strict=True)]

    def partial_row(self, name: str) -> dict:
        finite, mean, m2 = self.moments
        return {
            "column": name,
            "count": self.count,
            "nulls": self.nulls,
            "invalid": self.invalid,
            "invalid_example": self.invalid_example,
            "non_finite": self.non_finite,
            "min": None if self.low is None else render(self.low),
            "max": None if self.high is None else render(self.high),
            "finite": finite,
            "mean": mean if finite else None,
            "m2": m2 if finite else None,
            "values": [{"value": value, "count": count} for value, count in self.values.items()],
            "values_exact": self.values_exact,
            "histogram": self.histogram,
        }

    def output_row(self, column: dict, top: int) -> dict:
        finite, mean, m2 = self.moments
        edges = column.get("edges")
        numeric = column["type"] in NUMERIC
        ranked = heapq.nsmallest(top, self.values.items(), key=lambda item: (-item[1], item[0]))
        return {
            "column": column["name"],
            "type": column["type"],
            "count": self.count,
            "nulls": self.nulls,
            "invalid": self.invalid,
            "invalid_example": self.invalid_example,
            "non_finite": self.non_finite,
            "min": None if self.low is None else render(self.low),
            "max": None if self.high is None else render(self.high),
            "mean": mean if numeric and finite else None,
            "std": math.sqrt(m2 / (finite - 1)) if numeric and finite > 1 else None,
            "distinct": len(self.values) if self.values_exact else None,
            "top_values": [{"value": value, "count": count} for value, count in ranked],
            "top_values_exact": self.values_exact,
            "histogram": [
                {"low": low, "high": high, "count": count}
                for low, high, count in zip(edges, edges[1:], self.histogram, strict=False)
            ]
            if edges and self.histogram is not None
            else None,
        }


class StatsScanner(TypeScanner):
    """clean-table's count of the kinds of value in each column (NaN and infinities written as text
    counting as floats), and the range of each column's finite numbers, for the histogram edges."""

    needs_every_record = True  # the ranges fix the histogram's edges, and the counts are exact

    def __init__(self, params: dict):
        super().__init__(params)
        self.selected = parse_columns(params["columns"])
        self.bins = params["bins"]
        self.ranges: dict[int | str, tuple[float, float]] = {}  # by column index (CSV) or name

    def add(self, value: list | dict) -> None:
        if type(value) is list:
            while len(self.by_index) < len(value):
                self.by_index.append(Counter())
            for index, cell in enumerate(value):
                self._see(self.by_index[index], index, cell)
        else:
            for name, cell in value.items():
                self._see(self.by_name.setdefault(name, Counter()), name, cell)

    def _see(self, counter: Counter, key: int | str, cell) -> None:
        cell = clean(cell)
        if cell is None:
            return
        kind = kind_of(cell)
        if kind == "string" and type(cell) is str and NON_FINITE.match(cell):
            kind = "float"
        counter[kind] += 1
        if kind in NUMERIC:
            number = float(cell)
            if math.isfinite(number):
                self._widen(key, number, number)

    def _widen(self, key: int | str, low: float, high: float) -> None:
        if key in self.ranges:
            seen_low, seen_high = self.ranges[key]
            low, high = min(low, seen_low), max(high, seen_high)
        self.ranges[key] = (low, high)

    def add_table(self, table: pa.Table) -> None:
        super().add_table(table)
        for index, column in enumerate(table.columns):
            counter = self.by_index[index]
            if pa.types.is_floating(column.type):
                numbers = pc.filter(column, pc.is_finite(column))
            elif pa.types.is_integer(column.type):
                numbers = column
            elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                text = pc.utf8_trim_whitespace(column)
                words = _count(pc.match_substring_regex(text, NON_FINITE_PATTERN, ignore_case=True))
                if words:
                    counter.update(string=-words, float=words)
                numbers = _finite_numbers(pc.filter(text, pc.match_substring_regex(text, FLOAT_PATTERN)))
            else:
                continue
            extremes = pc.min_max(numbers)
            if extremes["min"].is_valid:
                self._widen(index, float(extremes["min"].as_py()), float(extremes["max"].as_py()))

    def plan(self, columns: list[str]) -> dict:
        selected = [data_column(name, columns) for name in self.selected]
        unknown = [name for name, column in zip(self.selected, selected, strict=True) if column is None]
        if unknown:
            raise ParamError(f"columns names a column the data does not have: {unknown[0]!r}")
        plan = super().plan(columns)
        planned = []
        for index, column in enumerate(plan["columns"]):
            if selected and column["name"] not in selected:
                continue
            column["index"] = index
            if column["type"] in NUMERIC:
                found = self.ranges.get(column["name"] if self.by_name else index)
                column["edges"] = bin_edges(*found, self.bins) if found else None
            planned.append(column)
        return {**plan, "columns": planned}


def _finite_numbers(text: pa.ChunkedArray) -> pa.ChunkedArray:
    """Text that reads as a number, as finite float64s (Python reads what Arrow's cast refuses)."""
    try:
        numbers = pc.cast(text, pa.float64())
    except pa.ArrowInvalid:
        numbers = pa.chunked_array([pa.array([float(value) for value in text.to_pylist()], pa.float64())])
    return pc.filter(numbers, pc.is_finite(numbers))


class ColumnStats(Processor):
    name = "column-stats"
    title = "Column statistics"
    description = (
        "Summarises each column: count, nulls, values that do not fit its type, min, max, mean, standard "
        "deviation, top values and a histogram, merged exactly across shards. Output: one row per column."
    )
    version = "1"
    input_formats = ("csv", "jsonl", "parquet")
    params = (
        *CleanTable.params,
        Param("columns", str, "", "Columns to summarise, as name,name; all of them when empty."),
        Param("bins", int, 20, "Histogram bins of each int or float column.", minimum=1, maximum=1000),
        Param("top_values", int, 10, "Most frequent values listed for each column.", minimum=1, maximum=1000),
    )
    reduces = True

    def validate_params(self, raw):
        params = super().validate_params(raw)
        parse_types(params["types"])
        return params

    def scanner(self, params: dict) -> StatsScanner:
        return StatsScanner(params)

    def output_schema(self, context: Context) -> pa.Schema:
        return PARTIAL_SCHEMA

    def process_batch(self, records: list[Record], context: Context) -> Batch:
        by_index = context.layout["format"] == "csv"
        rows = []
        for column in context.plan["columns"]:
            if by_index:
                cells = [record.value[column["index"]] for record in records]
            else:
                cells = [record.value.get(column["name"]) for record in records]
            rows.append(Summary.of(column, cells).partial_row(column["name"]))
        return Batch(table=pa.Table.from_pylist(rows, schema=PARTIAL_SCHEMA), kept=[r.position for r in records])

    def merge(self, partials: Iterable[pa.Table], context: Context) -> pa.Table:
        columns = {column["name"]: column for column in context.plan["columns"]}
        totals = {name: Summary.empty(column) for name, column in columns.items()}
        for table in partials:
            for row in table.to_pylist():
                totals[row["column"]].merge(Summary.from_row(columns[row["column"]], row))
        top = context.params["top_values"]
        return pa.Table.from_pylist(
            [totals[name].output_row(column, top) for name, column in columns.items()], schema=OUTPUT_SCHEMA
        )
