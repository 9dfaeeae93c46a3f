from datetime import UTC, date, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from jobs.processors import Record
from jobs.processors.base import Context, ParamError
from jobs.processors.clean_table import CleanTable, TypeScanner, clean, kind_of, parse_types


def scan(values: list, columns: list[str], **raw_params) -> dict:
    """The plan staging would make for these record values."""
    scanner = TypeScanner(CleanTable().validate_params(raw_params))
    for value in values:
        scanner.add(value)
    return scanner.plan(columns)


def types_of(plan: dict) -> dict[str, str]:
    return {column["name"]: column["type"] for column in plan["columns"]}


def records(values: list, first_position: int = 1) -> list[Record]:
    return [
        Record(position, position + 1, value, None, 0, 0, position + 1)
        for position, value in enumerate(values, start=first_position)
    ]


def process(values: list, columns: list[str] | None = None, first_position: int = 1, **raw_params):
    """Plan from the values as staging does, then process them as one batch."""
    params = CleanTable().validate_params(raw_params)
    if columns is None:
        layout = {"format": "jsonl", "columns": list(dict.fromkeys(key for value in values for key in value))}
    else:
        layout = {"format": "csv", "delimiter": ",", "quotechar": '"', "columns": columns}
    context = Context(params=params, plan=scan(values, layout["columns"], **raw_params), layout=layout)
    return CleanTable().process_batch(records(values, first_position), context)


# clean


def test_it_trims_strings():
    assert clean("  ann \t\n") == "ann"


def test_it_makes_empty_strings_null():
    assert clean("") is None
    assert clean("   ") is None


def test_it_normalises_strings_to_nfc():
    assert clean("Zoe\u0301") == "Zo\u00e9"


def test_it_leaves_other_values_alone():
    nested = {"a": [" x "]}
    assert clean(nested) is nested
    assert [clean(value) for value in (0, 1.5, False, None)] == [0, 1.5, False, None]


# kind_of


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("42", "int"),
        ("-7", "int"),
        ("+7", "int"),
        ("9223372036854775807", "int"),
        ("9223372036854775808", "string"),
        ("-9223372036854775809", "string"),
        ("1" * 5000, "string"),
        (42, "int"),
        (2**63, "string"),
        ("1.5", "float"),
        ("1e5", "float"),
        ("-2.5E-3", "float"),
        (".5", "float"),
        ("5.", "float"),
        (1.5, "float"),
        ("nan", "string"),
        ("inf", "string"),
        ("1,5", "string"),
        ("true", "bool"),
        ("False", "bool"),
        ("YES", "bool"),
        ("no", "bool"),
        (True, "bool"),
        ("y", "string"),
        ("2021-02-28", "date"),
        ("2021-02-30", "string"),
        ("2021-2-3", "string"),
        ("2021-02-28T10:30", "datetime"),
        ("2021-02-28 10:30:15.123", "datetime"),
        ("2021-02-28T10:30:00+02:00", "datetime_tz"),
        ("2021-02-28T10:30:00Z", "datetime_tz"),
        ("2021-02-28T25:30", "string"),
        ("2021-02-28T10:30 or so", "string"),
        ("ann", "string"),
        ({"a": 1}, "string"),
        ([1, 2], "string"),
    ],
)
def test_it_tells_the_kind_of_a_value(value, kind):
    assert kind_of(value) == kind


# TypeScanner


def test_it_infers_each_column_type_from_csv_rows():
    rows = [
        ["yes", "1", "1.5", "2021-01-02", "2021-01-02 03:04", "ann"],
        ["no", "2", "2", "2021-01-03", "2021-01-03", "3"],
    ]
    columns = ["ok", "n", "x", "day", "at", "name"]
    assert types_of(scan(rows, columns)) == {
        "ok": "bool",
        "n": "int",
        "x": "float",
        "day": "date",
        "at": "datetime",
        "name": "string",
    }


def test_it_counts_the_non_empty_values_of_each_column():
    plan = scan([["1", ""], ["2", " "], ["", "x"]], ["n", "s"])
    assert [column["values"] for column in plan["columns"]] == [2, 1]


def test_it_types_zeros_and_ones_as_int_not_bool():
    assert types_of(scan([["0"], ["1"]], ["flag"])) == {"flag": "int"}


def test_it_takes_the_type_that_enough_values_fit():
    rows = [[str(n)] for n in range(99)] + [["n/a"]]
    assert types_of(scan(rows, ["n"], type_threshold=0.99)) == {"n": "int"}
    assert types_of(scan(rows, ["n"], type_threshold=1.0)) == {"n": "string"}


def test_it_records_the_threshold_in_the_plan():
    assert scan([["1"]], ["n"], type_threshold="0.75")["type_threshold"] == 0.75


def test_it_uses_declared_types_over_inferred_ones():
    plan = scan([["1", "2021-01-01"], ["2", "2021-01-02"]], ["n", "day"], types="n:string, day:datetime")
    assert types_of(plan) == {"n": "string", "day": "datetime"}
    assert plan["columns"][1]["aware"] is False


def test_it_takes_a_declared_type_for_a_column_however_its_name_is_composed():
    plan = scan([["1", "2"]], ["cafe\u0301", "caf\u00e9s"], types="caf\u00e9:string, cafe\u0301s:string")
    assert types_of(plan) == {"cafe\u0301": "string", "caf\u00e9s": "string"}


def test_it_refuses_a_declared_type_for_a_column_the_data_lacks():
    with pytest.raises(ParamError, match="types names a column the data does not have: 'age'"):
        scan([["1"]], ["n"], types="age:int")


def test_it_infers_types_from_native_json_values():
    values = [
        {"ok": True, "n": 1, "x": 1.5, "s": "a", "tags": ["a"], "day": "2021-01-01"},
        {"ok": False, "n": 2, "x": 2, "s": 3, "tags": {"b": 1}, "day": "2021-01-02"},
    ]
    assert types_of(scan(values, ["ok", "n", "x", "s", "tags", "day"])) == {
        "ok": "bool",
        "n": "int",
        "x": "float",
        "s": "string",
        "tags": "string",
        "day": "date",
    }


def test_it_types_an_all_null_column_as_string():
    plan = scan([["1", ""], ["2", "  "]], ["n", "empty"])
    assert plan["columns"][1] == {"name": "empty", "type": "string", "values": 0}


def test_it_types_a_json_column_that_is_always_null_as_string():
    assert types_of(scan([{"a": 1, "b": None}, {"a": 2}], ["a", "b"])) == {"a": "int", "b": "string"}


def test_it_marks_a_datetime_column_with_a_timezone_as_aware():
    plan = scan([["2021-01-01T10:00"], ["2021-01-01T11:00+01:00"]], ["at"])
    assert plan["columns"][0]["type"] == "datetime"
    assert plan["columns"][0]["aware"] is True


def test_it_marks_a_naive_datetime_column_as_not_aware():
    assert scan([["2021-01-01T10:00"]], ["at"])["columns"][0]["aware"] is False


# CleanTable.process_batch


def test_it_outputs_each_type_as_its_arrow_type():
    rows = [
        ["1", "1.5", "yes", "2021-01-02", "2021-01-02T03:04:05+02:00", "ann"],
        ["2", "2", "no", "2021-01-03", "2021-01-03T00:00:00Z", "bob"],
    ]
    batch = process(rows, ["n", "x", "ok", "day", "at", "name"])
    assert batch.table.schema == pa.schema(
        [
            ("n", pa.int64()),
            ("x", pa.float64()),
            ("ok", pa.bool_()),
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("name", pa.string()),
        ]
    )


def test_it_casts_the_values():
    rows = [
        [" 1 ", "1.5", "Yes", "2021-01-02", "2021-01-02T03:04:05+02:00", " ann "],
        ["2", "1e3", "no", "", "2021-01-03", ""],
    ]
    batch = process(rows, ["n", "x", "ok", "day", "at", "name"])
    assert batch.table.to_pylist() == [
        {
            "n": 1,
            "x": 1.5,
            "ok": True,
            "day": date(2021, 1, 2),
            "at": datetime(2021, 1, 2, 1, 4, 5, tzinfo=UTC),
            "name": "ann",
        },
        {"n": 2, "x": 1000.0, "ok": False, "day": None, "at": datetime(2021, 1, 3, tzinfo=UTC), "name": None},
    ]


def test_it_outputs_naive_datetimes_without_a_timezone():
    batch = process([["2021-01-02 03:04:05"]], ["at"])
    assert batch.table.schema.field("at").type == pa.timestamp("us")
    assert batch.table.column("at").to_pylist() == [datetime(2021, 1, 2, 3, 4, 5)]


def test_it_rejects_a_record_whose_value_does_not_fit_its_column():
    batch = process([["1"], ["n/a"], ["3"]], ["n"], types="n:int")
    assert batch.table.column("n").to_pylist() == [1, 3]
    assert batch.kept == [1, 3]
    assert [(record.position, reason) for record, reason in batch.rejects] == [(2, "column 'n': 'n/a' is not an int")]


def test_it_rejects_the_minority_that_does_not_fit_the_inferred_type():
    rows = [[str(n)] for n in range(99)] + [["n/a"]]
    batch = process(rows, ["n"])
    assert batch.table.num_rows == 99
    assert [record.value for record, _ in batch.rejects] == [["n/a"]]


def test_it_rejects_a_record_once_naming_its_first_bad_column():
    batch = process([["1", "2"], ["x", "y"]], ["a", "b"], types="a:int,b:int")
    assert len(batch.rejects) == 1
    assert batch.rejects[0][1] == "column 'a': 'x' is not an int"


def test_it_rejects_values_outside_the_column_range():
    rows = [["9223372036854775807", "2021-02-28"], ["9223372036854775808", "2021-02-28"], ["1", "2021-02-30"]]
    batch = process(rows, ["n", "day"], types="n:int,day:date")
    assert batch.kept == [1]
    assert [reason for _, reason in batch.rejects] == [
        "column 'n': '9223372036854775808' is not an int",
        "column 'day': '2021-02-30' is not an ISO date",
    ]


def test_it_takes_naive_datetimes_as_utc_in_an_aware_column():
    batch = process([["2021-01-01T10:00"], ["2021-01-01T10:00+01:00"]], ["at"])
    assert batch.table.column("at").to_pylist() == [
        datetime(2021, 1, 1, 10, tzinfo=UTC),
        datetime(2021, 1, 1, 9, tzinfo=UTC),
    ]


def test_it_rejects_an_aware_datetime_in_a_naive_column():
    params = CleanTable().validate_params({})
    plan = {"columns": [{"name": "at", "type": "datetime", "aware": False, "values": 2}], "type_threshold": 0.99}
    context = Context(params=params, plan=plan, layout={"format": "csv"})
    batch = CleanTable().process_batch(records([["2021-01-01T10:00"], ["2021-01-01T10:00+01:00"]]), context)
    assert batch.kept == [1]
    assert batch.rejects[0][1] == "column 'at': '2021-01-01T10:00+01:00' is not an ISO datetime"


def test_it_keeps_the_input_positions_and_order_of_kept_records():
    rows = [["5"], ["x"], ["3"], ["y"], ["1"]]
    batch = process(rows, ["n"], first_position=41, types="n:int")
    assert batch.kept == [41, 43, 45]
    assert batch.table.column("n").to_pylist() == [5, 3, 1]
    assert [record.position for record, _ in batch.rejects] == [42, 44]
    assert len(batch.kept) + len(batch.rejects) == len(rows)


def test_it_processes_an_empty_batch():
    params = CleanTable().validate_params({})
    plan = {"columns": [{"name": "n", "type": "int", "values": 0}], "type_threshold": 0.99}
    batch = CleanTable().process_batch([], Context(params=params, plan=plan, layout={"format": "csv"}))
    assert batch.table.num_rows == 0
    assert batch.table.schema == pa.schema([("n", pa.int64())])
    assert list(batch.kept) == []
    assert batch.rejects == []


def test_it_casts_native_json_values():
    values = [
        {"ok": True, "n": 1, "x": 1, "at": "2021-01-01T00:00:00-01:00"},
        {"ok": False, "n": 2.0, "x": 2.5, "at": "2021-01-01"},
    ]
    batch = process(values)
    assert batch.table.to_pylist() == [
        {"ok": True, "n": 1, "x": 1.0, "at": datetime(2021, 1, 1, 1, tzinfo=UTC)},
        {"ok": False, "n": 2, "x": 2.5, "at": datetime(2021, 1, 1, tzinfo=UTC)},
    ]


def test_it_rejects_a_json_value_of_the_wrong_kind():
    batch = process([{"n": 1}, {"n": 2.5}, {"n": True}, {"n": 3}], types="n:int")
    assert batch.kept == [1, 4]
    assert [reason for _, reason in batch.rejects] == [
        "column 'n': 2.5 is not an int",
        "column 'n': True is not an int",
    ]


def test_it_writes_nested_json_in_a_string_column_as_json_text():
    values = [{"meta": {"b": 1, "a": "é"}}, {"meta": [1, None]}, {"meta": "plain"}, {"meta": 7}, {"meta": False}, {}]
    batch = process(values)
    assert batch.table.schema.field("meta").type == pa.string()
    assert batch.table.column("meta").to_pylist() == ['{"a": "é", "b": 1}', "[1, null]", "plain", "7", "false", None]


def test_it_converts_aware_datetimes_to_utc():
    offset = timezone(timedelta(hours=-5))
    batch = process([["2021-06-30T22:00:00-05:00"]], ["at"])
    assert batch.table.column("at").to_pylist() == [datetime(2021, 6, 30, 22, tzinfo=offset).astimezone(UTC)]
    assert batch.table.column("at").to_pylist()[0].hour == 3


# validate_params and parse_types


def test_it_fills_in_default_params():
    assert CleanTable().validate_params({}) == {"type_threshold": 0.99, "types": ""}


def test_it_parses_the_threshold_from_text():
    assert CleanTable().validate_params({"type_threshold": "0.5"})["type_threshold"] == 0.5


@pytest.mark.parametrize(
    ("threshold", "message"),
    [
        ("abc", "type_threshold must be a float, not 'abc'"),
        (0.2, "type_threshold must be at least 0.5, not 0.2"),
        (2, "type_threshold must be at most 1.0, not 2.0"),
        ("nan", "type_threshold must be a float, not 'nan'"),
        ("inf", "type_threshold must be a float, not 'inf'"),
        (float("nan"), "type_threshold must be a finite number, not nan"),
    ],
)
def test_it_refuses_a_bad_threshold(threshold, message):
    with pytest.raises(ParamError) as caught:
        CleanTable().validate_params({"type_threshold": threshold})
    assert str(caught.value) == message


@pytest.mark.parametrize("entry", ["age", "age:number", ":int"])
def test_it_refuses_a_bad_types_entry(entry):
    with pytest.raises(ParamError, match=rf"^types entry '{entry}' must be column:type"):
        CleanTable().validate_params({"types": f"n:int,{entry}"})


def test_it_refuses_an_unknown_parameter():
    with pytest.raises(ParamError, match=r"clean-table has no parameter 'colour' \(it takes: type_threshold, types\)"):
        CleanTable().validate_params({"colour": "red"})


def test_it_parses_declared_types():
    assert parse_types(" n : int ,, a:b:date,") == {"n": "int", "a:b": "date"}
    assert parse_types("") == {}
