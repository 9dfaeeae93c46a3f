"""column-stats: each column summarised batch by batch and merged exactly, checked against the same
figures computed by pyarrow and `statistics` over the whole data, in CSV, JSONL and Parquet."""

import csv
import io
import json
import math
import random
import statistics
import subprocess
from collections import Counter
from datetime import date, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from jobs.models import Job, State
from jobs.processors import Record, column_stats
from jobs.processors.base import Context, ParamError
from jobs.processors.column_stats import ColumnStats, StatsScanner, Summary, bin_edges, bin_of, combine_moments
from jobs.staging import fastcsv
from tests.support import EXAMPLE, OutputZip, job_form, manage, process_env, wait_for_end

ROWS = 3_000
CITIES = ["Lisbon", "Oslo", "Riga", "Turin", "Ghent", "Porto"]
COLUMNS = ["id", "score", "day", "city", "flag", "code", "note", "empty"]


def truth() -> pa.Table:
    """The dataset's good records, typed: what every format below writes."""
    rng = random.Random(31)
    scores = [None if n % 37 == 0 else round(rng.gauss(50, 12), 3) for n in range(ROWS)]
    scores[100], scores[200], scores[300] = math.nan, math.inf, -math.inf
    return pa.table(
        {
            "id": pa.array(range(1, ROWS + 1), pa.int64()),
            "score": pa.array(scores, pa.float64()),
            "day": pa.array([date(2025, 1, 1) + timedelta(days=n % 400) for n in range(ROWS)]),
            "city": pa.array([rng.choices(CITIES, weights=[6, 5, 4, 3, 2, 1])[0] for _ in range(ROWS)]),
            "flag": pa.array([n % 3 == 0 for n in range(ROWS)]),
            # Numbers but for one value in 500: an int column, with those values invalid.
            "code": pa.array(["n/a" if n % 500 == 7 else str(n * 13 % 1000) for n in range(ROWS)]),
            # Numbers and words half and half: a text column.
            "note": pa.array([str(n) if n % 2 else f"w{n % 5}" for n in range(ROWS)]),
            "empty": pa.array([None] * ROWS, pa.string()),
        }
    )


def text_of(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return value.isoformat() if isinstance(value, date) else str(value)


def as_csv(table: pa.Table) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.column_names)
    for n, row in enumerate(table.to_pylist()):
        if n == 1500:
            out.write("1,2,3\n")  # record 1501, on line 1502: too few fields
        writer.writerow([text_of(value) for value in row.values()])
    return out.getvalue().encode()


def as_jsonl(table: pa.Table) -> bytes:
    lines = []
    for n, row in enumerate(table.to_pylist()):
        if n == 1500:
            lines.append("{not json")
        lines.append(
            json.dumps({key: value.isoformat() if isinstance(value, date) else value for key, value in row.items()})
        )
    return ("\n".join(lines) + "\n").encode()  # json writes NaN and Infinity, and reads them back


def as_parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=700)
    return sink.getvalue()


def expected(table: pa.Table, name: str, edges: list[float] | None, top: int) -> dict:
    """A column's figures computed over the whole column at once, with pyarrow and statistics."""
    column = table.column(name)
    values = [value for value in column.to_pylist() if value is not None]
    figures = {"count": len(values), "nulls": column.null_count, "invalid": 0}
    if name == "code":  # typed as int: "n/a" is not one
        values = [int(value) for value in values if value != "n/a"]
        figures.update(count=len(values), invalid=len(column) - len(values))
    if name in ("score", "id", "code"):
        finite = pa.array([float(value) for value in values if math.isfinite(value)])
        extremes = pc.min_max(finite)
        figures.update(
            non_finite=len(values) - len(finite),
            mean=pc.mean(finite).as_py(),
            std=pc.stddev(finite, ddof=1).as_py(),
            low=extremes["min"].as_py(),
            high=extremes["max"].as_py(),
        )
        assert statistics.fmean(finite.to_pylist()) == pytest.approx(figures["mean"], rel=1e-12)
        counts = [0] * (len(edges) - 1)
        for number in finite.to_pylist():
            inside = [i for i in range(len(counts)) if edges[i] <= number < edges[i + 1]]
            counts[inside[0] if inside else len(counts) - 1] += 1  # only the maximum is in no half-open bin
        figures["histogram"] = counts
        values = [value for value in values if math.isfinite(value)] if name == "score" else values
        figures["min"], figures["max"] = text_of(min(values)), text_of(max(values))
    elif values:
        figures["min"], figures["max"] = text_of(min(values)), text_of(max(values))
    else:
        figures["min"] = figures["max"] = None
    rendered = Counter(text_of(float(v) if name == "score" else v) for v in column.to_pylist() if v is not None)
    if name == "code":
        del rendered["n/a"]
    figures["distinct"] = len(rendered)
    figures["top_values"] = [
        {"value": value, "count": count} for value, count in sorted(rendered.items(), key=lambda i: (-i[1], i[0]))[:top]
    ]
    return figures


def assert_summarised(output: list[dict], plan: dict, table: pa.Table, top: int) -> None:
    assert [row["column"] for row in output] == COLUMNS
    types = {row["column"]: row["type"] for row in output}
    assert types == {
        "id": "int", "score": "float", "day": "date", "city": "string", "flag": "bool", "code": "int",
        "note": "string", "empty": "string",
    }  # fmt: skip
    edges = {column["name"]: column.get("edges") for column in plan["columns"]}
    for row in output:
        name = row["column"]
        want = expected(table, name, edges[name], top)
        assert row["count"] + row["nulls"] + row["invalid"] == ROWS
        for key in ("count", "nulls", "invalid", "min", "max", "distinct", "top_values"):
            assert row[key] == want[key], (name, key)
        assert row["top_values_exact"] is True
        if "mean" in want:
            assert edges[name][0] == want["low"] and edges[name][-1] == want["high"]
            assert row["non_finite"] == want["non_finite"]
            assert row["mean"] == pytest.approx(want["mean"], rel=1e-12)
            assert row["std"] == pytest.approx(want["std"], rel=1e-9)
            assert [bin["count"] for bin in row["histogram"]] == want["histogram"]
            assert [(bin["low"], bin["high"]) for bin in row["histogram"]] == list(
                zip(edges[name], edges[name][1:], strict=False)
            )
        else:
            assert (row["mean"], row["std"], row["histogram"], row["non_finite"]) == (None, None, None, 0)
    by_name = {row["column"]: row for row in output}
    assert by_name["score"]["non_finite"] == 3 and by_name["score"]["max"] != "inf"
    assert (by_name["code"]["invalid"], by_name["code"]["invalid_example"]) == (6, "n/a")
    assert by_name["empty"]["nulls"] == ROWS and by_name["empty"]["top_values"] == []
    assert by_name["flag"]["top_values"] == [{"value": "false", "count": 2000}, {"value": "true", "count": 1000}]


# The merge math


def test_it_merges_moments_as_one_pass_over_all_the_numbers_would():
    rng = random.Random(7)
    numbers = [rng.uniform(-1e6, 1e6) + 1e9 for _ in range(5_000)]
    moments = (0, 0.0, 0.0)
    for start in range(0, len(numbers), 333):
        part = numbers[start : start + 333]
        mean = statistics.fmean(part)
        moments = combine_moments(moments, (len(part), mean, math.fsum((x - mean) ** 2 for x in part)))
    count, mean, m2 = moments
    assert count == len(numbers)
    assert mean == pytest.approx(statistics.fmean(numbers), rel=1e-15)
    assert math.sqrt(m2 / (count - 1)) == pytest.approx(statistics.stdev(numbers), rel=1e-10)


def test_it_leaves_moments_alone_when_merged_with_nothing():
    assert combine_moments((3, 2.0, 8.0), (0, 0.0, 0.0)) == (3, 2.0, 8.0)
    assert combine_moments((0, 0.0, 0.0), (3, 2.0, 8.0)) == (3, 2.0, 8.0)


def test_it_cuts_equal_bins_between_the_extremes():
    assert bin_edges(0.0, 10.0, 4) == [0.0, 2.5, 5.0, 7.5, 10.0]
    assert bin_edges(3.0, 3.0, 4) == [3.0, 3.0]
    huge = bin_edges(-1.7e308, 1.7e308, 2)
    assert huge == [-1.7e308, 0.0, 1.7e308], "no overflow between the extremes"
    edges = [0.0, 2.5, 5.0, 7.5, 10.0]
    assert [bin_of(edges, x) for x in (0.0, 2.4, 2.5, 9.9, 10.0)] == [0, 0, 1, 3, 3]
    assert bin_of([3.0, 3.0], 3.0) == 0


def summary_column(kind: str, edges: list[float] | None = None) -> dict:
    return {"name": "x", "type": kind, "index": 0, "edges": edges}


@pytest.mark.parametrize(
    ("kind", "cells", "edges"),
    [
        ("int", [str(n * 7 % 101) if n % 9 else "" for n in range(400)], bin_edges(0, 100, 7)),
        ("float", [f"{n / 3:.4f}" if n % 11 else "nan" for n in range(400)], bin_edges(1 / 3, 133, 5)),
        ("date", [(date(2020, 1, 1) + timedelta(days=n % 50)).isoformat() for n in range(400)], None),
        ("string", [f"v{n % 17}" if n % 5 else "oops" for n in range(400)], None),
    ],
)
def test_a_merge_of_any_split_equals_the_summary_of_the_whole(kind, cells, edges):
    column = summary_column(kind, edges)
    whole = Summary.of(column, cells)
    for cut in (1, 57, 200, 399):
        merged = Summary.of(column, cells[:cut])
        merged.merge(Summary.from_row(column, Summary.of(column, cells[cut:]).partial_row("x")))
        for name in ("count", "nulls", "invalid", "non_finite", "low", "high", "values", "histogram"):
            assert getattr(merged, name) == getattr(whole, name), name
        assert merged.moments == pytest.approx(whole.moments, rel=1e-12)


def test_top_values_beyond_the_cap_are_said_to_be_approximate(monkeypatch):
    monkeypatch.setattr(column_stats, "DISTINCT_CAP", 5)
    column = summary_column("string")
    few = Summary.of(column, ["a", "b", "a", "c"])
    assert few.values_exact and few.values == Counter(a=2, b=1, c=1)
    many = Summary.of(column, ["a"] * 9 + ["b"] * 5 + [f"u{n}" for n in range(20)])
    assert not many.values_exact
    assert len(many.values) == 5 and many.values["a"] == 9 and many.values["b"] == 5
    few.merge(many)
    row = few.output_row(column, top=2)
    assert row["top_values"] == [{"value": "a", "count": 11}, {"value": "b", "count": 6}]
    assert (row["top_values_exact"], row["distinct"]) == (False, None)


def test_nan_and_infinities_are_counted_apart_from_the_finite_numbers():
    column = summary_column("float", bin_edges(1.0, 3.0, 2))
    summary = Summary.of(column, ["1", "NaN", "inf", "-Infinity", "3", "2", "", "x"])
    row = summary.output_row(column, top=10)
    assert (row["count"], row["nulls"], row["invalid"], row["non_finite"]) == (6, 1, 1, 3)
    assert (row["min"], row["max"], row["mean"], row["std"]) == ("1.0", "3.0", 2.0, 1.0)
    assert [bin["count"] for bin in row["histogram"]] == [1, 2]
    assert {item["value"] for item in row["top_values"]} == {"1.0", "2.0", "3.0", "nan", "inf", "-inf"}


# Staging's plan


def plan_of(rows: list, names: list[str], **raw_params) -> dict:
    scanner = StatsScanner(ColumnStats().validate_params(raw_params))
    for row in rows:
        scanner.add(row)
    return scanner.plan(names)


def test_it_types_the_columns_and_fixes_the_bins_of_the_numeric_ones():
    rows = [[str(n), f"{n / 4}", "2024-02-0" + str(n % 9 + 1), "x"] for n in range(1, 101)]
    plan = plan_of(rows, ["n", "q", "d", "s"], bins="4")
    by_name = {column["name"]: column for column in plan["columns"]}
    assert [by_name[name]["type"] for name in "nqds"] == ["int", "float", "date", "string"]
    assert by_name["n"]["edges"] == [1.0, 25.75, 50.5, 75.25, 100.0]
    assert by_name["q"]["edges"] == [0.25, 6.4375, 12.625, 18.8125, 25.0]
    assert "edges" not in by_name["d"]


def test_nan_and_inf_text_make_no_float_column_text():
    rows = [[f"{n}.5"] for n in range(50)] + [["nan"], ["-inf"], ["Infinity"]]
    (column,) = plan_of(rows, ["x"])["columns"]
    assert column["type"] == "float" and column["edges"] == bin_edges(0.5, 49.5, 20)


def test_the_fast_csv_read_makes_the_plan_the_exact_read_makes():
    data = as_csv(truth()).decode()
    rows = list(csv.reader(io.StringIO(data)))[1:]
    good = [row for row in rows if len(row) == len(COLUMNS)]
    exact = plan_of(good, COLUMNS, bins="8")
    scanner = StatsScanner(ColumnStats().validate_params({"bins": "8"}))
    body = "".join(line + "\n" for line in data.splitlines()[1:])
    table, malformed = fastcsv._parse(body.encode(), COLUMNS, ",")
    assert malformed == 1
    scanner.add_table(table)
    assert scanner.plan(COLUMNS) == exact


def test_it_summarises_only_the_columns_asked_for():
    plan = plan_of([["1", "a", "b"]], ["n", "s", "t"], columns=" t , n")
    assert [(column["name"], column["index"]) for column in plan["columns"]] == [("n", 0), ("t", 2)]


def test_it_summarises_a_column_however_its_name_is_composed_under_the_data_s_spelling():
    plan = plan_of(
        [["1", "a", "b"]], ["cafe\u0301", "s", "\u0645\u06cc\u200c\u062e"], columns="caf\u00e9,\u0645\u06cc\u200c\u062e"
    )
    assert [column["name"] for column in plan["columns"]] == ["cafe\u0301", "\u0645\u06cc\u200c\u062e"]


def test_it_refuses_a_column_the_data_does_not_have():
    with pytest.raises(ParamError, match="columns names a column the data does not have: 'nope'"):
        plan_of([["1"]], ["n"], columns="n,nope")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"bins": "0"}, "bins must be at least 1"),
        ({"bins": "many"}, "bins must be a int, not 'many'"),
        ({"top_values": "5000"}, "top_values must be at most 1000"),
        ({"types": "n:number"}, "types entry 'n:number'"),
        ({"colums": "n"}, "column-stats has no parameter 'colums'"),
    ],
)
def test_it_refuses_bad_params(raw, message):
    with pytest.raises(ParamError, match=message):
        ColumnStats().validate_params(raw)


def test_a_batch_keeps_every_record_and_holds_one_partial_row_per_column():
    params = ColumnStats().validate_params({})
    rows = [["1", "a"], ["2", ""], ["x", "b"]]
    plan = plan_of(rows, ["n", "s"])
    records = [Record(n, n + 1, row, None, 0, 0, n + 1) for n, row in enumerate(rows, start=1)]
    batch = ColumnStats().process_batch(records, Context(params=params, plan=plan, layout={"format": "csv"}))
    assert batch.kept == [1, 2, 3] and batch.rejects == []
    assert batch.table.column("column").to_pylist() == ["n", "s"]
    assert batch.table.column("nulls").to_pylist() == [0, 1]


# End to end: the form, staging, the slots, assembly, the download; and the command


def stats_form(data: bytes, name: str, **params) -> dict:
    form = job_form(data, name=name, work="column-stats")
    form.update({f"param-column-stats-{key}": value for key, value in params.items()})
    return form


def download(client, job: Job, name: str) -> bytes:
    return b"".join(client.get(f"/jobs/{job.pk}/output/{name}").streaming_content)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("write", "suffix", "rejected"), [(as_csv, "csv", 1), (as_jsonl, "jsonl", 1), (as_parquet, "parquet", 0)]
)
def test_a_dataset_is_summarised_end_to_end_across_shards(fleet, partner_client, write, suffix, rejected):
    table = truth()
    response = partner_client.post("/jobs/new/", stats_form(write(table), f"data.{suffix}", bins="8", top_values="3"))
    assert response.status_code == 302
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    assert job.shards.count() > 4
    assert (job.records_total, job.records_out, job.records_rejected) == (ROWS + rejected, ROWS, rejected)
    output = pq.read_table(io.BytesIO(download(partner_client, job, "output.parquet")))
    assert output.schema == column_stats.OUTPUT_SCHEMA
    assert_summarised(output.to_pylist(), job.plan, table, top=3)
    manifest = json.loads(download(partner_client, job, "manifest.json"))
    assert manifest["records"] == {
        "in": ROWS + rejected, "out": ROWS, "rejected": rejected, "in_failed_shards": 0, "not_processed": 0,
    }  # fmt: skip
    rejects = list(csv.DictReader(io.StringIO(download(partner_client, job, "rejects.csv").decode())))
    if rejected:
        assert [(row["record"], row["line"]) for row in rejects] == [("1501", "1501" if suffix == "jsonl" else "1502")]
    else:
        assert rejects == []
    assert sorted(OutputZip(partner_client, job).names) == ["manifest.json", "output.parquet", "rejects.csv"]
    page = partner_client.get(f"/jobs/{job.pk}/")
    assert page.status_code == 200 and "column-stats" in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_column_the_data_lacks_fails_staging_with_its_name(fleet, partner_client):
    response = partner_client.post("/jobs/new/", stats_form(as_csv(truth()), "data.csv", columns="city,town"))
    assert response.status_code == 302
    job = wait_for_end(Job.objects.get())
    assert job.state == State.FAILED
    assert job.error == "Staging failed: columns names a column the data does not have: 'town'"


@pytest.mark.django_db(transaction=True)
def test_the_submit_command_writes_the_summary(fleet, organisation, partner, tmp_path):
    command = manage(
        "submit", "--org", "partner-lab", "--as", "partner",
        "--data", str(EXAMPLE), "--work", "column-stats", "--gpus", "2",
        "--hours", "0.5", "--param", "columns=lifetime_value,country", "--param", "bins=5", "--wait",
        "--output", str(tmp_path),
    )  # fmt: skip
    result = subprocess.run(command, check=False, env=process_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    job = Job.objects.get()
    assert job.shards.count() > 1
    header, *rows = csv.reader(EXAMPLE.open(encoding="utf-8", newline=""))
    source = [dict(zip(header, row, strict=True)) for row in rows if len(row) == len(header)]
    assert (job.records_out, job.records_rejected) == (len(source), len(rows) - len(source))
    output = {row["column"]: row for row in pq.read_table(tmp_path / "output.parquet").to_pylist()}
    assert list(output) == ["lifetime_value", "country"]
    texts = [row["lifetime_value"].strip() for row in source if row["lifetime_value"].strip()]
    values = [float(text) for text in texts if text != "n/a"]
    value = output["lifetime_value"]
    assert (value["type"], value["count"], value["invalid"], value["invalid_example"]) == (
        "float", len(values), texts.count("n/a"), "n/a",
    )  # fmt: skip
    assert value["count"] + value["nulls"] + value["invalid"] == len(source)
    assert value["mean"] == pytest.approx(statistics.fmean(values), rel=1e-12)
    assert value["std"] == pytest.approx(statistics.stdev(values), rel=1e-9)
    assert (float(value["min"]), float(value["max"])) == (min(values), max(values))
    assert sum(bin["count"] for bin in value["histogram"]) == len(values) and len(value["histogram"]) == 5
    countries = Counter(row["country"].strip() for row in source if row["country"].strip())
    top = sorted(countries.items(), key=lambda item: (-item[1], item[0]))[:10]
    assert [(item["value"], item["count"]) for item in output["country"]["top_values"]] == top
