"""Compressed datasets: gzip (one member or several), zstd and bzip2 (one stream or several), known by their
first bytes, staged uncompressed and run through a pass with every record at its uncompressed position; the
SHA-256 recorded and checked is that of the bytes as sent. A stream cut short, corrupt or followed by garbage
fails the job with one sentence naming the source and the byte as sent; a bomb is refused by its ratio and by
its size before it fills the disk."""

import bz2
import csv
import gzip
import hashlib
import http.server
import io
import json
import re
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.test import override_settings

from jobs import processors
from jobs.models import Job, State
from jobs.staging import compressed, stage
from tests.datasets import picture, tarred
from tests.factories import make_job
from tests.jobs.uploads import tus
from tests.support import OutputZip, job_form, wait_for_end

BAD_LINES = {200: "1,2,3,4", 7_001: "x", 19_999: "5,6,7,8"}  # line: a row clean-table rejects (too wide, too narrow)


def table(rows: int = 20_000) -> bytes:
    """A CSV of `rows` lines after its header, with a bad row at each line of BAD_LINES."""
    lines = ["id,name,amount"]
    for line in range(2, rows + 2):
        lines.append(BAD_LINES.get(line, f"{line},customer {line},{line * 1.5}"))
    return ("\n".join(lines) + "\n").encode()


def gzip_members(data: bytes) -> bytes:
    half = data.index(b"\n", len(data) // 2) + 1
    return gzip.compress(data[:half]) + gzip.compress(data[half:])


def bzip2_streams(data: bytes) -> bytes:
    half = data.index(b"\n", len(data) // 2) + 1
    return bz2.compress(data[:half]) + bz2.compress(data[half:])


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


COMPRESSIONS = {
    "gzip": (gzip.compress, "gzip"),
    "gzip of two members": (gzip_members, "gzip"),
    "zstd": (zstd, "zstd"),
    "bzip2 of two streams": (bzip2_streams, "bzip2"),
}


def decompressed(raw: bytes, what: str = "data.gz") -> bytes:
    return compressed.open_decompressed(io.BytesIO(raw), what).read()


def broken(raw: bytes, what: str = "data.gz") -> str:
    with pytest.raises(compressed.CompressedError) as refused:
        decompressed(raw, what)
    return str(refused.value)


# The stream alone


@pytest.mark.parametrize("name", COMPRESSIONS)
def test_it_decompresses_each_compression_and_hashes_the_bytes_as_sent(name):
    compress, kind = COMPRESSIONS[name]
    plain = table(2_000)
    raw = compress(plain)
    stream = compressed.open_decompressed(io.BytesIO(raw), "data")
    assert (compressed.sniff(raw[:4]), stream.compression) == (kind, kind)
    assert stream.read() == plain
    assert (stream.raw_bytes, stream.raw_sha256()) == (len(raw), hashlib.sha256(raw).hexdigest())


def test_it_hands_data_that_is_not_compressed_on_as_it_is_read():
    plain = table(100)
    stream = compressed.open_decompressed(io.BytesIO(plain), "data.csv")
    assert stream.compression is None and compressed.sniff(plain[:4]) is None
    assert stream.read() == plain
    assert stream.raw_sha256() == hashlib.sha256(plain).hexdigest()


def test_it_reads_a_stream_that_can_neither_peek_nor_seek():
    raw = gzip.compress(table(100))

    class Unseekable(io.RawIOBase):
        def __init__(self):
            self.data = io.BytesIO(raw)

        def readinto(self, buffer):
            return self.data.readinto(memoryview(buffer)[:7])  # short reads, and the magic across two of them

        def readable(self):
            return True

    assert compressed.open_decompressed(Unseekable(), "data.gz").read() == table(100)


def test_it_reads_zero_padding_after_a_gzip_member_as_gzip_does():
    assert decompressed(gzip.compress(b"a,b\n1,2\n") + bytes(512)) == b"a,b\n1,2\n"


def test_it_names_the_byte_where_each_compression_was_cut_short():
    plain = table(2_000)
    for raw, kind, unit in [
        (gzip_members(plain), "gzip", "member"),
        (zstd(plain), "zstd", "frame"),
        (bzip2_streams(plain), "bzip2", "stream"),
    ]:
        cut = raw[: len(raw) - 10]
        message = broken(cut)
        assert message.startswith(f"data.gz: the {kind} data ends at byte {len(cut):,}, in the middle of the {unit}")
        assert message.endswith("it was cut short.")


def test_it_names_where_a_corrupt_zstd_frame_was_found_to_the_block():
    plain = table(20_000)
    raw = bytearray(zstd(plain))
    raw[len(raw) // 2] ^= 0xFF
    message = broken(bytes(raw), "data.zst")
    start, end = (int(n.replace(",", "")) for n in message.split("at bytes ")[1].split(" as sent")[0].split(" to "))
    assert message.startswith("data.zst: the zstd data is corrupt (")
    assert start <= len(raw) // 2 < end and end - start <= 128 * 1024 + 3, "the block it is in"


def test_it_refuses_garbage_after_the_last_member_naming_its_first_byte():
    raw = gzip.compress(b"a,b\n1,2\n")
    assert broken(raw + b"trailing") == (
        f"data.gz: byte {len(raw):,} onwards is not gzip data: something other than another member follows the "
        "last complete one."
    )


@override_settings(E31_MAX_COMPRESSION_RATIO=200)
def test_it_refuses_a_bomb_by_its_ratio_before_handing_out_what_is_past_it(monkeypatch):
    monkeypatch.setattr(compressed, "RATIO_ALLOWANCE", 1024 * 1024)
    stream = compressed.open_decompressed(io.BytesIO(gzip.compress(bytes(64 * 1024 * 1024))), "zeros.gz")
    handed_out = 0
    with pytest.raises(compressed.CompressedError, match=r"^zeros\.gz expands more than 200 times \("):
        while data := stream.read1(1024 * 1024):
            handed_out += len(data)
    assert handed_out <= 200 * stream.sent.offset + 1024 * 1024


@override_settings(E31_MAX_DATASET_BYTES=100_000, E31_MAX_COMPRESSION_RATIO=100_000)
def test_it_holds_the_uncompressed_bytes_to_the_dataset_limit():
    message = broken(gzip.compress(table(20_000)), "big.csv.gz")
    assert message.startswith("big.csv.gz, uncompressed, is more than the 100,000-byte (")
    assert "limit for a dataset: refused at byte " in message


# Staging, and the pass


def test_it_refuses_at_submit_a_compressed_upload_that_cannot_be_read(partner_client, online_slots):
    raw = gzip.compress(table(100))[:-20]
    answer = partner_client.post("/jobs/new/", job_form(raw, name="customers.csv.gz"))
    assert answer.status_code == 400
    assert "customers.csv.gz: the gzip data ends at byte" in answer.content.decode()
    assert not Job.objects.exists()


@pytest.mark.parametrize("name", COMPRESSIONS)
def test_it_stages_each_compression_uncompressed_and_runs_the_pass_at_its_positions(name, fleet, partner_client):
    compress, kind = COMPRESSIONS[name]
    plain = table()
    raw = compress(plain)
    answer = partner_client.post("/jobs/new/", job_form(raw, name="customers.data"))  # the name says nothing
    assert answer.status_code == 302, answer.content.decode()[:2000]
    job = wait_for_end(Job.objects.get(), timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    assert (job.input_compression, job.sent_bytes, job.input_bytes) == (kind, len(raw), len(plain))
    assert job.input_sha256 == hashlib.sha256(raw).hexdigest()
    output = OutputZip(partner_client, job)
    rows = pq.read_table(io.BytesIO(output.read("output.parquet"))).to_pylist()
    rejects = list(csv.DictReader(io.StringIO(output.read("rejects.csv").decode())))
    assert {int(row["line"]): row["raw"] for row in rejects} == BAD_LINES
    assert sorted(int(row["record"]) for row in rejects) == [line - 1 for line in BAD_LINES]
    positions = [row["_record"] for row in rows] + [int(row["record"]) for row in rejects]
    assert sorted(positions) == list(range(1, job.records_total + 1)) and job.records_total == 20_000
    manifest = json.loads(output.read("manifest.json"))["input"]
    assert (manifest["compression"], manifest["sent_bytes"], manifest["bytes"]) == (kind, len(raw), len(plain))
    assert manifest["sha256"] == hashlib.sha256(raw).hexdigest()
    page = partner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert f"{kind}-compressed; staged uncompressed" in page


def staged(organisation, raw: bytes, name: str = "customers.csv.gz", **fields) -> Job:
    """A job staged from `raw` uploaded, as the control worker stages it."""
    job = make_job(organisation, State.SUBMITTED, source_name=name, gpus=2, **fields)
    Job.objects.filter(pk=job.pk).update(source_path=default_storage.save(f"test-compressed/{name}", ContentFile(raw)))
    stage.stage(job.pk)
    job.refresh_from_db()
    return job


def test_it_checks_the_expected_sha256_against_the_bytes_as_sent(organisation):
    raw = zstd(table(1_000))
    job = staged(organisation, raw, expected_sha256=hashlib.sha256(raw).hexdigest())
    assert job.state == State.QUEUED, job.error
    assert (job.input_compression, job.sent_bytes) == ("zstd", len(raw))
    with default_storage.open(job.staged_path, "rb") as copy:
        assert copy.read() == table(1_000), "the staged copy is the data uncompressed"
    assert job.staged_path.endswith(".csv"), "and is named so"
    other = staged(organisation, raw, expected_sha256=hashlib.sha256(table(1_000)).hexdigest())
    assert other.state == State.FAILED
    assert f"the data's SHA-256 is {hashlib.sha256(raw).hexdigest()}, not the" in other.error


@pytest.mark.parametrize(
    ("name", "spoil", "message"),
    [
        ("customers.csv.gz", lambda raw: raw[: len(raw) // 2], r"the gzip data ends at byte [\d,]+, in the middle of"),
        ("customers.csv.zst", lambda raw: raw, r"the zstd data is corrupt \(.+\): the decoder found it at bytes"),
        ("customers.csv.bz2", lambda raw: raw[:-1], r"the bzip2 data ends at byte [\d,]+, in the middle of"),
    ],
    ids=["a truncated gzip", "a corrupt zstd frame", "a truncated bzip2"],
)
def test_it_fails_the_job_naming_the_source_and_the_byte_where_the_data_broke(organisation, name, spoil, message):
    plain = table()
    compress = {"gz": gzip.compress, "zst": zstd, "bz2": bz2.compress}[name.rsplit(".", 1)[1]]
    raw = bytearray(spoil(compress(plain)))
    if name.endswith(".zst"):
        raw[len(raw) // 2] ^= 0xFF
    job = staged(organisation, bytes(raw), name)
    assert job.state == State.FAILED
    assert job.error.startswith(f"Staging failed: {name}: ")
    assert job.error.count(". ") == 0 and job.error.endswith("."), "one sentence"
    assert re.search(message, job.error), job.error
    assert not job.staged_path and not job.input_compression


@override_settings(E31_MAX_COMPRESSION_RATIO=200)
def test_it_fails_a_job_whose_data_is_a_bomb_by_its_ratio(organisation, monkeypatch):
    monkeypatch.setattr(compressed, "RATIO_ALLOWANCE", 1024 * 1024)
    job = staged(organisation, gzip.compress(b"a,b\n" + b"1,2\n" * 4 * 1024 * 1024), "bomb.csv.gz")
    assert job.state == State.FAILED
    assert "bomb.csv.gz expands more than 200 times" in job.error
    assert "refused as a compression bomb before it filled the disk." in job.error


@override_settings(E31_MAX_DATASET_BYTES=200_000)
def test_it_fails_a_job_whose_data_uncompressed_passes_the_dataset_limit(organisation):
    raw = bzip2_streams(table())
    assert len(raw) < 200_000 < len(table())
    job = staged(organisation, raw, "big.csv.bz2")
    assert job.state == State.FAILED
    assert "big.csv.bz2, uncompressed, is more than the 200,000-byte (" in job.error


def serving(body: bytes, length: int | None = None):
    """A server on loopback answering every GET with `body`, announcing `length` bytes (the body's own by default)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("cut", [False, True], ids=["whole", "the connection ends early"])
def test_it_stages_a_compressed_download_and_names_a_connection_that_ends_early(organisation, cut):
    raw = gzip.compress(table())
    server = serving(raw[: len(raw) // 2] if cut else raw, length=len(raw))
    try:
        job = make_job(organisation, State.SUBMITTED, source_name="data", gpus=2)
        url = f"http://localhost:{server.server_address[1]}/data"
        Job.objects.filter(pk=job.pk).update(source_kind=Job.Source.URL, source_uri=url)
        stage.stage(job.pk)
    finally:
        server.shutdown()
    job.refresh_from_db()
    if cut:
        assert job.state == State.FAILED and "gzip" not in job.error, job.error
        return
    assert job.state == State.QUEUED, job.error
    assert (job.input_compression, job.sent_bytes, job.input_bytes) == ("gzip", len(raw), len(table()))


def test_it_streams_a_compressed_upload_into_the_pass(fleet, partner_client):
    """A work kind that scans nothing before the pass streams: shards are cut from the uncompressed copy as it grows."""
    raw = gzip.compress(table())
    form = job_form(raw, name="numbers.csv.gz", work="test-slow-echo", gpus="1")
    form["param-test-slow-echo-seconds_per_batch"] = "0"
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    assert (job.input_compression, job.input_sha256) == ("gzip", hashlib.sha256(raw).hexdigest())
    records = json.loads(OutputZip(partner_client, job).read("manifest.json"))["records"]
    assert records["in"] == records["out"] + records["rejected"] == 20_000


def test_it_stages_a_compressed_parquet_file_and_tar_of_images_as_the_files_inside(organisation):
    table_file = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(500)), "name": [f"n{n}" for n in range(500)]}), table_file)
    parquet_job = staged(organisation, zstd(table_file.getvalue()), "table.parquet.zst")
    assert (parquet_job.state, parquet_job.input_format, parquet_job.records_total) == (State.QUEUED, "parquet", 500)
    images = make_job(
        organisation, State.SUBMITTED, work="image-thumbs", params=processors.get("image-thumbs").validate_params({})
    )
    Job.objects.filter(pk=images.pk).update(
        source_name="photos.tar.gz",
        source_path=default_storage.save(
            "test-compressed/p",
            ContentFile(gzip.compress(tarred({f"photos/{n}.png": picture(kind="PNG") for n in range(3)}))),
        ),
    )
    stage.stage(images.pk)
    images.refresh_from_db()
    assert (images.state, images.input_format, images.input_compression) == (State.QUEUED, "images", "gzip"), (
        images.error
    )


def test_it_takes_a_compressed_resumable_upload_as_its_uncompressed_format(partner_client, online_slots):
    raw = bz2.compress(table(1_000))
    url = tus.created(partner_client, length=len(raw), name="customers.csv.bz2")
    assert tus.send(partner_client, url, 0, raw).status_code == 204
    assert partner_client.post("/jobs/new/", tus.job_with_upload(url)).status_code == 302
    assert Job.objects.get().input_format == "csv"


def test_it_passes_over_a_skippable_zstd_frame_without_holding_it():
    skippable = (0x184D2A50).to_bytes(4, "little") + (1_000_000).to_bytes(4, "little") + bytes(1_000_000)
    assert decompressed(skippable + zstd(b"a,b\n1,2\n")) == b"a,b\n1,2\n"
    assert broken(skippable[:500], "data.zst").startswith("data.zst: the zstd data ends at byte 500, in the middle")


@pytest.mark.parametrize(
    ("name", "plain"),
    [("customers.csv.gz", "customers.csv"), ("p.JSONL.ZST", "p.JSONL"), ("data.bz2", "data"), (".gz", ".gz")],
)
def test_it_names_an_uncompressed_copy_without_the_compressions_suffix(name, plain):
    assert compressed.plain_name(name) == plain
