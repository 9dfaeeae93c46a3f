"""The staged copy of a file on this machine: read into a few reused buffers, each lent to the scan and
the writer; a large copy written past the page cache. Whatever the path, the copy is the data byte for
byte, its checksum and record count are the data's, and a buffer is filled again only once both
borrowers have let go of it."""

import errno
import hashlib
import http.server
import io
import os
import threading

import pytest
from django.core.files.storage import default_storage

from jobs.models import Job, State
from jobs.staging import stage, staged_copy
from tests.jobs.staging.reading import job_for
from tests.jobs.staging.test_fastcsv import HEADER, rows, staged_upload

pytestmark = pytest.mark.django_db

# 280,000 records, about 15 MB: fourteen 1 MiB chunks through a ring of two buffers, and a last
# piece that no block size divides.
DATA = HEADER + rows(280_000) + b"280000,last,1.5,2026-01-01\n"


def assert_copy_is_the_data(job: Job, data: bytes) -> None:
    with default_storage.open(job.staged_path, "rb") as copy:
        assert copy.read() == data
    assert job.input_bytes == len(data)
    assert job.input_sha256 == hashlib.sha256(data).hexdigest()
    assert job.records_total == data.count(b"\n") - 1
    default_storage.delete(job.staged_path)


def takes_direct_writes(folder: str) -> bool:
    probe = os.path.join(folder, "direct-probe")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT))
    except OSError:
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)
    return True


def direct_writes(monkeypatch) -> dict:
    """Every copy written directly; what `_direct` opened, and the bytes written through it."""
    seen = {"opened": [], "bytes": 0}
    direct, write_at = staged_copy._direct, staged_copy._write_at

    def opened(path, size):
        seen["opened"].append(direct(path, size))
        return seen["opened"][-1]

    def written(out, data, at):
        if out in seen["opened"]:
            seen["bytes"] += len(data)
        write_at(out, data, at)

    monkeypatch.setattr(staged_copy, "DIRECT_FROM", 0)
    monkeypatch.setattr(staged_copy, "_direct", opened)
    monkeypatch.setattr(staged_copy, "_write_at", written)
    return seen


def assert_written_directly(job: Job, seen: dict, whole: bool = True) -> None:
    """Where the filesystem takes direct writes, every whole 1 MiB piece went through them; with `whole` false
    (a download, lent on in the pieces the wire gave, of any size) some did, and never more than the data's
    whole blocks: a piece goes through them only where it starts and ends on a block."""
    if not takes_direct_writes(os.path.dirname(default_storage.path(job.staged_path))):
        assert seen["opened"] == [None]
        return
    assert len(seen["opened"]) == 1 and seen["opened"][0] is not None
    if whole:
        assert seen["bytes"] == len(DATA) // staged_copy._Hashing.CHUNK * staged_copy._Hashing.CHUNK
    else:
        assert 0 < seen["bytes"] <= len(DATA) // staged_copy.DIRECT_ALIGN * staged_copy.DIRECT_ALIGN


@pytest.fixture
def two_buffers(monkeypatch):
    monkeypatch.setattr(staged_copy._Ring, "BUFFERS", 2)


@pytest.mark.usefixtures("two_buffers")
def test_a_large_copy_is_written_past_the_page_cache_byte_for_byte(organisation, monkeypatch):
    opened = direct_writes(monkeypatch)
    job = staged_upload(organisation, DATA)
    assert_written_directly(job, opened)
    assert_copy_is_the_data(job, DATA)


@pytest.mark.usefixtures("two_buffers")
def test_a_small_copy_is_made_by_the_kernel_from_the_file(organisation, monkeypatch):
    copied = []
    copy_range = staged_copy._copy_range
    monkeypatch.setattr(staged_copy, "_copy_range", lambda *args: copied.append(args[-1]) or copy_range(*args))
    job = staged_upload(organisation, DATA)
    assert sum(copied) == len(DATA), "every byte copied by the kernel"
    assert_copy_is_the_data(job, DATA)


@pytest.mark.usefixtures("two_buffers")
def test_a_large_download_is_written_past_the_page_cache_byte_for_byte(organisation, monkeypatch, tmp_path):
    """A download whose announced length is large enough goes through the ring too, and is written directly."""
    opened = direct_writes(monkeypatch)
    (tmp_path / "data.csv").write_bytes(DATA)
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        job = job_for(organisation)
        Job.objects.filter(pk=job.pk).update(
            state=State.SUBMITTED,
            source_kind=Job.Source.URL,
            source_uri=f"http://localhost:{server.server_address[1]}/data.csv",
        )
        stage.stage(job.pk)
    finally:
        server.shutdown()
    job.refresh_from_db()
    assert job.state == State.QUEUED, job.error
    assert_written_directly(job, opened, whole=False)
    assert_copy_is_the_data(job, DATA)


@pytest.mark.usefixtures("two_buffers")
def test_a_filesystem_that_refuses_direct_writes_gets_the_bytes_through_the_page_cache(organisation, monkeypatch):
    """Opened for direct writes, and then refusing them (EINVAL): the rest is written the usual way."""
    monkeypatch.setattr(staged_copy, "DIRECT_FROM", 0)
    refusing: list[int] = []

    def opened_plain(path, size):
        refusing.append(os.open(path, os.O_WRONLY))
        return refusing[-1]

    write_at = staged_copy._write_at

    def refused(out, data, at):
        if out in refusing:
            raise OSError(errno.EINVAL, "Invalid argument")
        write_at(out, data, at)

    monkeypatch.setattr(staged_copy, "_direct", opened_plain)
    monkeypatch.setattr(staged_copy, "_write_at", refused)
    assert_copy_is_the_data(staged_upload(organisation, DATA), DATA)


def test_a_writer_without_a_thread_closes_its_direct_descriptor(monkeypatch, tmp_path):
    """A process at its thread limit: the staging attempt fails with the error, and leaks no descriptor."""

    def refused(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    out = os.open(tmp_path / "copy", os.O_WRONLY | os.O_CREAT)
    direct = os.open(tmp_path / "copy", os.O_WRONLY)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        staged_copy._Writer(out, direct=direct)
    os.close(out)  # the caller's, as `with open(...)` closes it in _save_to_filesystem
    with pytest.raises(OSError) as closed:
        os.fstat(direct)
    assert closed.value.errno == errno.EBADF


def test_no_direct_writes_where_the_filesystem_cannot_open_for_them(monkeypatch, tmp_path):
    opened = os.open

    def no_direct(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return opened(path, flags, *args)

    monkeypatch.setattr(staged_copy.os, "open", no_direct)
    assert staged_copy._direct(str(tmp_path / "copy"), staged_copy.DIRECT_FROM) is None
    assert staged_copy._direct(str(tmp_path / "copy"), None) is None, "a size not known beforehand"


@pytest.mark.usefixtures("two_buffers")
def test_a_buffer_is_filled_again_only_once_both_borrowers_let_go():
    ring = staged_copy._Ring(4)
    source = io.BytesIO(b"abcdefghijkl")
    lent = [ring.fill(source) for _ in range(2)]
    assert ring.free.empty(), "every buffer lent"
    first, done = lent[0]
    assert bytes(first) == b"abcd"
    done()  # the scan lets go; the writer has not
    assert ring.free.empty()
    done()
    assert ring.free.qsize() == 1
    again, _ = ring.fill(source)
    assert bytes(again) == b"ijkl", "the buffer both let go of"
    assert bytes(lent[1][0]) == b"efgh", "the one still lent, untouched"


class _Trickle(io.RawIOBase):
    """A file read as it grows: each read gives a few bytes."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def readinto(self, buffer) -> int:
        count = min(len(buffer), 4096, len(self.data) - self.at)
        buffer[:count] = self.data[self.at : self.at + count]
        self.at += count
        return count


@pytest.mark.usefixtures("two_buffers")
def test_a_buffer_is_filled_whole_from_short_reads():
    """Else a ring of small pieces, all held by the scan until it has the header, would leave the
    reading thread waiting for a buffer and the scan for more bytes."""
    ring = staged_copy._Ring(64 * 1024)
    source = _Trickle(DATA[: 100 * 1024])
    first, _ = ring.fill(source)
    second, _ = ring.fill(source)
    assert (bytes(first), bytes(second)) == (DATA[: 64 * 1024], DATA[64 * 1024 : 100 * 1024])
