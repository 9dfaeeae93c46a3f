"""What a resumed upload is keyed by and remembers, and how it cuts a file into chunks: no server needed."""

import base64
import os
import zlib
from pathlib import Path

import pytest
from e31.client import PIECE, pieces
from e31.upload import BLOCK, ChunkReader, FileSpan, ResumeStore, backoff, checksum, chunk_spans, metadata, resume_key


def test_it_keys_an_upload_by_server_path_size_and_mtime(tmp_path):
    path = tmp_path / "data.csv"
    key = resume_key("https://portal.example", path, 100, 1_700_000_000_000_000_000)
    assert key == resume_key("https://portal.example/", path, 100, 1_700_000_000_000_000_000)
    others = [
        resume_key("https://other.example", path, 100, 1_700_000_000_000_000_000),
        resume_key("https://portal.example", tmp_path / "other.csv", 100, 1_700_000_000_000_000_000),
        resume_key("https://portal.example", path, 101, 1_700_000_000_000_000_000),
        resume_key("https://portal.example", path, 100, 1_700_000_000_000_000_001),
    ]
    assert key not in others and len(set(others)) == 4


def test_it_keys_a_relative_path_as_the_absolute_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resume_key("https://p", Path("data.csv"), 1, 2) == resume_key("https://p", tmp_path / "data.csv", 1, 2)


def test_it_remembers_and_forgets_an_upload(tmp_path):
    store = ResumeStore(tmp_path / "uploads")
    assert store.get("k") is None
    store.put("k", "https://portal.example/api/v1/uploads/3f2c/", size=10)
    assert store.get("k") == "https://portal.example/api/v1/uploads/3f2c/"
    store.forget("k")
    store.forget("k")
    assert store.get("k") is None


def test_it_treats_a_damaged_state_file_as_no_upload(tmp_path):
    store = ResumeStore(tmp_path)
    (tmp_path / "k.json").write_text("{half a")
    assert store.get("k") is None


def test_it_cuts_the_rest_of_a_file_into_chunks():
    assert list(chunk_spans(0, 10, 4)) == [(0, 4), (4, 4), (8, 2)]
    assert list(chunk_spans(6, 10, 4)) == [(6, 4)]
    assert list(chunk_spans(10, 10, 4)) == []
    assert list(chunk_spans(0, 8, 4)) == [(0, 4), (4, 4)]
    with pytest.raises(ValueError):
        list(chunk_spans(0, 8, 0))


def crc32_header(data: bytes) -> str:
    return "crc32 " + base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


@pytest.mark.parametrize("size", [1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 7])
def test_it_reads_each_chunk_at_its_offset_with_its_checksum(tmp_path, size):
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(size))
    chunk_size = max(1, size // 3 + 1)
    reader = ChunkReader(path, size, chunk_size)
    try:
        spans = [reader.at(start) for start, _ in chunk_spans(0, size, chunk_size)]
        # after a HEAD moved the offset back: read again, not from the read-ahead
        span, digest = reader.at(chunk_size) if size > chunk_size else spans[0]
        again = b"".join(span), digest
        chunks = [(b"".join(span), digest) for span, digest in spans]
        twice = [b"".join(span) for span, _ in spans]  # a chunk sent again is read again
    finally:
        reader.close()
    assert b"".join(chunk for chunk, _ in chunks) == path.read_bytes()
    assert [len(span) for span, _ in spans] == [length for _, length in chunk_spans(0, size, chunk_size)]
    assert [chunk for chunk, _ in chunks] == twice
    assert all(digest == crc32_header(chunk) for chunk, digest in chunks)
    assert again == chunks[min(1, len(chunks) - 1)]


def test_a_chunk_goes_out_a_block_at_a_time(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(3 * BLOCK + 7))
    with path.open("rb") as handle:
        blocks = list(FileSpan(path, handle.fileno(), 5, 3 * BLOCK))
    assert [len(block) for block in blocks] == [BLOCK, BLOCK, BLOCK]
    assert b"".join(blocks) == path.read_bytes()[5 : 5 + 3 * BLOCK]


def test_it_says_when_the_file_shrank_while_uploading(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 100)
    reader = ChunkReader(path, 200, 150)
    try:
        with pytest.raises(OSError, match="ends at byte 100, before byte 200: it changed while uploading"):
            reader.at(100)
    finally:
        reader.close()


def test_it_writes_tus_headers():
    assert metadata("données.csv") == "filename " + base64.b64encode("données.csv".encode()).decode()
    assert checksum([]) == "crc32 AAAAAA=="
    assert checksum(b"123456789") == checksum([b"1234", b"56789"]) == "crc32 y/Q5Jg=="  # CRC-32's check value


def test_it_backs_off_to_half_a_minute():
    assert [backoff(attempt) for attempt in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]


@pytest.mark.parametrize("size", [0, 1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 7])
def test_a_body_goes_out_in_pieces_that_add_up_to_it(size):
    body = bytes(index % 251 for index in range(size))
    sent = list(pieces(body))
    assert b"".join(sent) == body
    assert all(len(piece) <= PIECE for piece in sent)
    assert len(sent) == -(-size // PIECE)
