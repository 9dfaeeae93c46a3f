import io

import pytest

from jobs.processors import Record
from jobs.staging.formats import NEITHER, FormatError, detect, iter_records, read_header
from tests.jobs.staging.reading import COMMAS, read


def reread(data: bytes, layout: dict, previous: Record | None, last: Record, *, header: int = 0) -> list[Record]:
    """The records after `previous` up to `last`, read from their byte range alone, as a shard is."""
    start = previous.end if previous else header
    return list(
        iter_records(
            io.BytesIO(data[start : last.end]),
            layout,
            start=start,
            end=last.end,
            first_position=previous.position + 1 if previous else 1,
            first_line=previous.end_line + 1 if previous else data[:header].count(b"\n") + 1,
        )
    )


# detect


def test_it_refuses_an_empty_file():
    with pytest.raises(FormatError, match="The file is empty"):
        detect(b"", at_eof=True)


def test_it_refuses_whitespace_only():
    with pytest.raises(FormatError, match="nothing but whitespace"):
        detect(b" \n\t\r\n", at_eof=True)


def test_it_refuses_a_binary_file():
    with pytest.raises(FormatError, match="binary file"):
        detect(b"a,b\n1,\x002\n", at_eof=True)


def test_it_names_the_byte_and_offset_of_non_utf8_text():
    with pytest.raises(FormatError, match=r"byte 0xff at offset 6"):
        detect(b"a,b\n1,\xff\n", at_eof=True)


def test_it_names_the_byte_and_offset_of_non_utf8_text_after_a_bom():
    with pytest.raises(FormatError, match=r"byte 0xff at offset 9"):
        detect(b"\xef\xbb\xbfa,b\n1,\xff\n", at_eof=True)


def test_it_accepts_a_sample_cut_inside_a_character():
    assert detect("a,b\n1,é".encode()[:-1], at_eof=False)["format"] == "csv"


def test_it_refuses_a_file_ending_inside_a_character():
    with pytest.raises(FormatError, match=r"byte 0xc3 at offset 6"):
        detect("a,b\n1,é".encode()[:-1], at_eof=True)


def test_it_refuses_a_json_array():
    with pytest.raises(FormatError, match="JSON array"):
        detect(b'  [{"a": 1}, {"a": 2}]', at_eof=True)


def test_it_detects_jsonl():
    assert detect(b'{"a": 1}\n{"a": 2}\n', at_eof=True) == {"format": "jsonl"}


def test_it_detects_jsonl_after_blank_lines():
    assert detect(b'\n\n{"a": 1}\n', at_eof=True) == {"format": "jsonl"}


def test_it_refuses_jsonl_whose_first_line_is_invalid():
    with pytest.raises(FormatError, match="line 1 is not valid JSON"):
        detect(b'{"a": 1,\n"b": 2}\n', at_eof=True)


def test_it_counts_blank_lines_in_the_jsonl_line_number():
    with pytest.raises(FormatError, match="line 3 is not valid JSON"):
        detect(b'\n\n{"a": 1} x\n', at_eof=True)


def test_it_detects_jsonl_whose_first_record_is_longer_than_the_sample():
    data = b'{"text": "' + b"x" * 100 + b'"}\n'
    assert detect(data[:50], at_eof=False) == {"format": "jsonl"}


def test_it_detects_jsonl_holding_unicode_line_separators():
    assert detect('{"a": "one\u2028two\u0085three"}\n'.encode(), at_eof=True) == {"format": "jsonl"}


@pytest.mark.parametrize(
    ("data", "delimiter"),
    [
        (b"a,b,c\n1,2,3\n4,5,6\n", ","),
        (b"a;b;c\n1;2,5;3\n4;5,5;6\n", ";"),
        (b"a\tb\tc\n1\t2\t3\n", "\t"),
        (b"a|b|c\n1|2|3\n", "|"),
    ],
)
def test_it_detects_the_csv_delimiter(data, delimiter):
    assert detect(data, at_eof=True) == {"format": "csv", "delimiter": delimiter, "quotechar": '"'}


def test_it_detects_csv_with_a_bom():
    assert detect(b"\xef\xbb\xbfa;b\n1;2\n", at_eof=True)["delimiter"] == ";"


def test_it_detects_csv_with_quoted_delimiters():
    assert detect(b'a,b\n"x;y;z",2\n"p;q;r",3\n', at_eof=True)["delimiter"] == ","


def test_it_refuses_prose_as_neither_csv_nor_jsonl():
    with pytest.raises(FormatError) as caught:
        detect(b"Dear team, thanks for the GPUs.\nWe will be done by Friday.\n", at_eof=True)
    assert str(caught.value) == NEITHER
    assert "neither CSV" in NEITHER and "JSONL" in NEITHER and "Parquet" in NEITHER and "images" in NEITHER


def test_it_accepts_a_single_column_when_the_name_ends_in_csv():
    assert detect(b"name\nann\nbob\n", at_eof=True, name="People.CSV") == COMMAS


def test_it_refuses_a_single_column_otherwise():
    with pytest.raises(FormatError, match="neither CSV"):
        detect(b"name\nann\nbob\n", at_eof=True, name="people.txt")


def test_it_ignores_the_last_line_of_a_sample_cut_mid_line():
    assert detect(b"a,b,c\n1,2,3\n4,5", at_eof=False)["delimiter"] == ","


def test_it_counts_the_last_line_when_the_file_ends():
    with pytest.raises(FormatError, match="neither CSV"):
        detect(b"a,b,c\n1,2,3\n4,5", at_eof=True)


# read_header


def test_it_reads_the_header_and_where_the_data_starts():
    data = b"\nname,age\nann,3\n"
    assert read_header(io.BytesIO(data), COMMAS) == (["name", "age"], 10, 2)


def test_it_counts_the_lines_of_a_multiline_header():
    data = b'"first\nname",age\nann,3\n'
    assert read_header(io.BytesIO(data), COMMAS) == (["first\nname", "age"], 17, 2)


def test_it_strips_the_bom_from_the_first_header_cell():
    columns, offset, _ = read_header(io.BytesIO(b"\xef\xbb\xbfname,age\nann,3\n"), COMMAS)
    assert columns == ["name", "age"]
    assert offset == 12


def test_it_makes_header_names_usable_and_distinct():
    columns, _, _ = read_header(io.BytesIO(b" a ,,a,a\n"), COMMAS)
    assert columns == ["a", "column_2", "a_2", "a_3"]


def test_it_refuses_a_csv_without_a_header_row():
    with pytest.raises(FormatError, match="no header row"):
        read_header(io.BytesIO(b"\n\n"), COMMAS)


# iter_records on CSV


def test_it_numbers_csv_records_from_one_after_the_header():
    _, records = read(b"name,age\nann,3\nbob,4\n")
    assert [(r.position, r.line, r.value, r.error) for r in records] == [
        (1, 2, ["ann", "3"], None),
        (2, 3, ["bob", "4"], None),
    ]


def test_it_gives_each_csv_record_its_byte_range():
    data = b"name,age\nann,3\nbob,4"
    _, records = read(data)
    assert [data[r.start : r.end] for r in records] == [b"ann,3\n", b"bob,4"]


def test_it_counts_the_lines_inside_a_quoted_field():
    _, records = read(b'name,note\nann,"one\ntwo\nthree"\nbob,plain\n')
    assert [(r.position, r.line, r.end_line) for r in records] == [(1, 2, 4), (2, 5, 5)]
    assert records[0].value == ["ann", "one\ntwo\nthree"]


def test_it_skips_blank_lines_without_counting_them_as_records():
    _, records = read(b"name,age\n\nann,3\n\n\nbob,4\n")
    assert [(r.position, r.line) for r in records] == [(1, 3), (2, 6)]


def test_it_skips_whitespace_only_lines_like_blank_ones():
    _, records = read(b"name,age\n   \nann,3\n\t\nbob,4\n")
    assert [(r.position, r.line, r.error) for r in records] == [(1, 3, None), (2, 5, None)]


def test_it_reads_crlf_line_endings():
    data = b"name,age\r\nann,3\r\n\r\nbob,4\r\n"
    _, records = read(data)
    assert [(r.position, r.line, r.value) for r in records] == [(1, 2, ["ann", "3"]), (2, 4, ["bob", "4"])]
    assert data[records[1].start : records[1].end] == b"bob,4\r\n"


def test_it_gives_a_record_with_the_wrong_field_count_an_error():
    _, records = read(b"name,age\nann,3,extra\nbob\ncid,5\n", COMMAS)
    assert [(r.position, r.error) for r in records] == [
        (1, "expected 2 fields, found 3"),
        (2, "expected 2 fields, found 1"),
        (3, None),
    ]
    assert records[0].value == ["ann", "3", "extra"]


def test_it_counts_the_bom_in_the_byte_ranges():
    data = b"\xef\xbb\xbfname,age\nann,3\n"
    _, records = read(data)
    assert records[0].start == 12
    assert data[records[0].start : records[0].end] == b"ann,3\n"


def test_it_reads_a_middle_byte_range_as_the_full_read_does():
    data = b'id,note\n1,a\n\n2,"b\nb"\n3,c,extra\n\n\n4,d\n5,"e\n\ne"\n6,f\n'
    layout, records = read(data)
    assert len(records) == 6
    # records 3 to 5, from the end of record 2 (a shard's start) to the end of record 5
    assert reread(data, layout, records[1], records[4]) == records[2:5]


def test_it_reads_every_shard_of_a_csv_as_the_full_read_does():
    data = b'id,note\n1,a\n\n2,"b\nb"\n3,c,extra\n\n\n4,d\n5,"e\n\ne"\n6,f\n'
    layout, records = read(data)
    cuts = [None, *records]
    for first in range(len(cuts) - 1):
        for last in range(first + 1, len(cuts)):
            assert reread(data, layout, cuts[first], cuts[last], header=8) == records[first:last]


def test_it_stops_at_the_end_of_the_byte_range():
    data = b"id\n1\n2\n3\n"
    layout = {**COMMAS, "columns": ["id"]}
    stream = io.BytesIO(data)
    stream.seek(3)
    assert [r.value for r in iter_records(stream, layout, start=3, end=7, first_line=2)] == [["1"], ["2"]]


def test_it_rejects_an_unmatched_quote_with_the_line_of_its_record_and_reads_on():
    _, records = read(b'a,b\n1,2\n"3,4\n5,6\n', COMMAS)
    assert [(record.line, record.value, record.error) for record in records] == [
        (2, ["1", "2"], None),
        (3, None, "a quote opened on line 3 is never closed"),
        (4, ["5", "6"], None),
    ]


def test_it_names_the_line_holding_invalid_utf8():
    data = b"a,b\n1,2\n3,4\n" + b"x" * 70000 + b",\xff\n"
    layout = {**COMMAS, "columns": ["a", "b"]}
    stream = io.BytesIO(data)
    stream.seek(4)
    with pytest.raises(FormatError, match=r"Line 4 is not UTF-8 text \(byte 0xff\)"):
        list(iter_records(stream, layout, start=4, first_line=2))


# iter_records on JSONL


def test_it_reads_jsonl_records_with_positions_and_lines():
    data = b'{"a": 1}\n\n  \n{"a": 2}\n'
    _, records = read(data)
    assert [(r.position, r.line, r.value, r.error) for r in records] == [(1, 1, {"a": 1}, None), (2, 4, {"a": 2}, None)]
    assert [data[r.start : r.end] for r in records] == [b'{"a": 1}\n', b'{"a": 2}\n']


def test_it_gives_an_invalid_json_line_an_error():
    _, records = read(b'{"a": 1}\n{"a": \n{"a": 3}\n')
    assert records[1].position == 2
    assert records[1].line == 2
    assert records[1].value is None
    assert records[1].error.startswith("not valid JSON: ")
    assert records[2].error is None


def test_it_gives_a_json_value_that_is_not_an_object_an_error():
    _, records = read(b'{"a": 1}\n[1, 2]\n"text"\n')
    assert [(r.position, r.value, r.error) for r in records[1:]] == [
        (2, None, "not a JSON object"),
        (3, None, "not a JSON object"),
    ]


def test_it_reads_a_jsonl_file_with_a_bom():
    _, records = read(b'\xef\xbb\xbf{"a": 1}\n{"a": 2}\n')
    assert [r.value for r in records] == [{"a": 1}, {"a": 2}]


def test_it_reads_a_middle_byte_range_of_jsonl_as_the_full_read_does():
    data = b'{"a": 1}\n\n{"a": 2}\nnope\n\n{"a": 4}\n{"a": 5}\n'
    layout, records = read(data)
    assert len(records) == 5
    assert reread(data, layout, records[0], records[3]) == records[1:4]
