"""Where a resumed download goes on from, and what the portal's Range answers say: no server needed."""

import hashlib

import pytest
from e31.download import (
    DownloadError,
    body_start,
    is_whole,
    parse_content_range,
    partial_path,
    range_header,
    resume_offset,
)


def test_it_goes_on_from_the_end_of_the_partial_file():
    assert resume_offset(0, 1000) == 0
    assert resume_offset(400, 1000) == 400
    assert resume_offset(1000, 1000) == 1000
    assert resume_offset(400, None) == 400


def test_it_starts_over_when_the_partial_file_is_longer_than_the_file():
    assert resume_offset(1001, 1000) == 0


def test_it_asks_for_the_rest_only_when_it_has_a_start():
    assert range_header(0) == {}
    assert range_header(400) == {"Range": "bytes=400-"}


def test_it_reads_content_range():
    assert parse_content_range("bytes 400-999/1000") == (400, 999, 1000)
    assert parse_content_range("bytes 0-0/*") == (0, 0, None)
    with pytest.raises(ValueError):
        parse_content_range("bytes */1000")


def test_it_starts_the_body_where_the_answer_says():
    assert body_start(206, "bytes 400-999/1000", 400) == 400
    assert body_start(200, None, 400) == 0  # a server that ignored the Range sent the whole file
    with pytest.raises(DownloadError, match="from 400 on, the portal sent them from 0"):
        body_start(206, "bytes 0-999/1000", 400)


def test_it_keeps_the_partial_file_beside_the_file(tmp_path):
    assert partial_path(tmp_path / "output.parquet") == tmp_path / "output.parquet.part"


def test_it_knows_a_file_that_is_already_whole(tmp_path):
    path = tmp_path / "rejects.csv"
    path.write_bytes(b"position,reason\n")
    expected = {"bytes": 16, "sha256": hashlib.sha256(b"position,reason\n").hexdigest()}
    assert is_whole(path, expected)
    assert not is_whole(path, {**expected, "sha256": "0" * 64})
    assert not is_whole(path, None)
    assert not is_whole(tmp_path / "missing", expected)
