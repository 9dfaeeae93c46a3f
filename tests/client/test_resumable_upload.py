"""The upload resumes: after Ctrl-C, the same command run again sends only what the portal had not
confirmed; a connection dropped mid-chunk is retried within the same run; an upload the portal no
longer has, or whose bytes are no longer the file's beginning, is started over. All against the portal
the tests start, through real sockets."""

import hashlib
import json
import math
import os
import shutil
import signal
from pathlib import Path
from urllib.parse import urlsplit

import e31 as library
from e31.upload import ResumeStore, checksum, resume_key

from jobs.models import Job, Upload
from tests.client.world import DroppingProxy, grown_csv
from tests.support import EXAMPLE, wait_for, wait_for_end

CHUNK = 64 * 1024
SUBMIT = ("submit", "big.csv", "--work", "clean-table", "--gpus", "1", "--hours", "1", "--chunk-size", "64K")
SUBMIT_EXAMPLE = ("submit", "customers.csv", *SUBMIT[2:])


def staged_sha256(job_id: int) -> str:
    return wait_for(
        lambda: Job.objects.get(pk=job_id).input_sha256, timeout=120, interval=0.2, what=f"job {job_id} to stage"
    )


def settled_offset(organisation) -> int:
    """The upload's offset once no request in flight moves it any more."""
    seen = []

    def still() -> bool:
        seen.append(Upload.objects.get(organisation=organisation).offset)
        return len(seen) >= 5 and len(set(seen[-5:])) == 1

    wait_for(still, timeout=30, interval=0.2, what="the upload's offset to settle")
    return seen[-1]


def test_it_resumes_after_ctrl_c_sending_only_the_bytes_not_confirmed(e31, fleet, portal, token, organisation):
    data = grown_csv(e31.folder / "big.csv", 12 * 1024 * 1024)
    size = data.stat().st_size
    # The network hangs half-way: the Ctrl-C comes in the middle of the upload, however fast the machine.
    proxy = DroppingProxy(int(urlsplit(portal.url).port), drop_after=size // 2, stall=True)
    try:
        first = e31.start(*SUBMIT, E31_URL=proxy.url)
        wait_for(
            lambda: first.poll() is not None or proxy.dropped,
            timeout=60,
            interval=0.01,
            what="the upload to hang half-way",
        )
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=30)
        proxy.release()
        assert (first.returncode, out) == (130, ""), err
        assert err.startswith("e31: Upload stopped at byte ") and err.count("\n") == 1, err
        assert err.endswith("run the same command to resume it.\n")
        (state,) = (e31.folder.parent / "cache" / "e31" / "uploads").glob("*.json")
        url = json.loads(state.read_text())["url"]
        settled_offset(organisation)
        with library.Client(portal.url, token) as client:
            confirmed = client.upload_offset(url)["offset"]
        assert 0 < confirmed < size, "interrupted in the middle"
        mark = len(portal.lines())
        second = e31(*SUBMIT, E31_URL=proxy.url)  # the same command, to the same address: it resumes
    finally:
        proxy.close()
    assert second.returncode == 0, second.stderr
    assert f"Resuming the upload of big.csv at byte {confirmed:,} of {size:,}." in second.stderr
    chunks = math.ceil((size - confirmed) / CHUNK)
    sent = portal.requests("PATCH", urlsplit(url).path, after=mark, at_least=chunks)
    assert len(sent) == chunks
    assert all('" 204 ' in line for line in sent), sent
    assert not state.exists(), "a job's data now: forgotten"
    job_id = int(second.stdout)
    assert staged_sha256(job_id) == hashlib.sha256(data.read_bytes()).hexdigest()
    wait_for_end(Job.objects.get(pk=job_id))  # before the next test: its fleet is free again


def test_it_retries_a_dropped_connection_within_the_same_run(e31, fleet, portal):
    data = grown_csv(e31.folder / "big.csv", 2 * 1024 * 1024)
    proxy = DroppingProxy(int(urlsplit(portal.url).port), drop_after=1024 * 1024)
    try:
        done = e31(*SUBMIT, E31_URL=proxy.url)
    finally:
        proxy.close()
    assert done.returncode == 0, done.stderr
    assert proxy.dropped == 1
    assert "Upload interrupted" in done.stderr
    job_id = int(done.stdout)
    assert staged_sha256(job_id) == hashlib.sha256(data.read_bytes()).hexdigest()
    wait_for_end(Job.objects.get(pk=job_id))  # before the next test: its fleet is free again


def test_it_starts_over_when_the_portal_no_longer_has_the_upload(e31, fleet, portal, token):
    data = e31.folder / "customers.csv"
    shutil.copy(EXAMPLE, data)
    stat = data.stat()
    key = resume_key(portal.url, data, stat.st_size, stat.st_mtime_ns)
    store = ResumeStore(e31.folder.parent / "cache" / "e31" / "uploads")
    with library.Client(portal.url, token) as client:
        url = client.create_upload(stat.st_size, data.name)
        start = data.read_bytes()[:CHUNK]
        assert client.upload_chunk(url, 0, start, checksum(start)) == CHUNK
        store.put(key, url)
        client.delete_upload(url)
    done = e31("submit", "customers.csv", "--work", "clean-table", "--gpus", "1", "--hours", "1")
    assert done.returncode == 0, done.stderr
    assert "Resuming" not in done.stderr
    assert store.get(key) is None
    job_id = int(done.stdout)
    assert staged_sha256(job_id) == hashlib.sha256(data.read_bytes()).hexdigest()
    wait_for_end(Job.objects.get(pk=job_id))  # before the next test: its fleet is free again


def cut_off_upload(e31, portal, token, data: Path, length: int) -> str:
    """An upload of the file's first `length` bytes, remembered as `e31 submit` remembers one it was stopped in."""
    stat = data.stat()
    store = ResumeStore(e31.folder.parent / "cache" / "e31" / "uploads")
    start = data.read_bytes()[:length]
    with library.Client(portal.url, token) as client:
        url = client.create_upload(stat.st_size, data.name)
        for offset in range(0, length, CHUNK):
            chunk = start[offset : offset + CHUNK]
            assert client.upload_chunk(url, offset, chunk, checksum(chunk)) == offset + len(chunk)
    store.put(resume_key(portal.url, data, stat.st_size, stat.st_mtime_ns), url)
    return url


def upload_of(url: str) -> Upload | None:
    return Upload.objects.filter(pk=url.rstrip("/").rsplit("/", 1)[-1]).first()


def test_an_unchanged_file_resumes_without_sending_its_first_bytes_again(e31, fleet, portal, token):
    data = e31.folder / "customers.csv"
    shutil.copy(EXAMPLE, data)
    size = data.stat().st_size
    url = cut_off_upload(e31, portal, token, data, 4 * CHUNK)
    mark = len(portal.lines())
    done = e31(*SUBMIT_EXAMPLE)
    assert done.returncode == 0, done.stderr
    assert f"Resuming the upload of customers.csv at byte {4 * CHUNK:,} of {size:,}." in done.stderr
    assert "starts over" not in done.stderr
    sent = portal.requests("PATCH", urlsplit(url).path, after=mark)
    assert len(sent) == math.ceil((size - 4 * CHUNK) / CHUNK), "only the chunks after the portal's bytes"
    job_id = int(done.stdout)
    assert staged_sha256(job_id) == hashlib.sha256(data.read_bytes()).hexdigest()
    wait_for_end(Job.objects.get(pk=job_id))  # before the next test: its fleet is free again


def test_it_starts_over_when_a_byte_the_portal_has_changed_though_size_and_mtime_did_not(e31, fleet, portal, token):
    data = e31.folder / "customers.csv"
    shutil.copy(EXAMPLE, data)
    url = cut_off_upload(e31, portal, token, data, 4 * CHUNK)
    before = data.stat()
    edited = bytearray(data.read_bytes())
    edited[edited.index(b"@example.com", 3 * CHUNK) + 1] = ord("E")  # one byte of the fourth chunk sent
    data.write_bytes(edited)
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (data.stat().st_size, data.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    done = e31(*SUBMIT_EXAMPLE)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"customers.csv changed since its upload began: its first {4 * CHUNK:,} bytes are not those the portal "
        "has, so the upload starts over.\n"
        f"Job {done.stdout.strip()} submitted: 1 × 1 h of clean-table over customers.csv\n"
    )
    assert upload_of(url) is None, "the upload of the old bytes is discarded"
    job_id = int(done.stdout)
    assert staged_sha256(job_id) == hashlib.sha256(edited).hexdigest()
    wait_for_end(Job.objects.get(pk=job_id))  # before the next test: its fleet is free again


def test_it_starts_over_when_the_portal_cannot_say_what_its_bytes_hold(e31, fleet, portal, token):
    data = e31.folder / "customers.csv"
    shutil.copy(EXAMPLE, data)
    url = cut_off_upload(e31, portal, token, data, 2 * CHUNK)
    Upload.objects.filter(pk=upload_of(url).pk).update(crc32=None)  # an upload begun before the portal kept it
    done = e31(*SUBMIT_EXAMPLE)
    assert done.returncode == 0, done.stderr
    assert (
        f"The portal cannot say what its {2 * CHUNK:,} bytes of customers.csv hold, so the upload starts over.\n"
        in done.stderr
    )
    assert "Resuming" not in done.stderr and upload_of(url) is None
    job_id = int(done.stdout)
    assert staged_sha256(job_id) == hashlib.sha256(data.read_bytes()).hexdigest()
    wait_for_end(Job.objects.get(pk=job_id))  # before the next test: its fleet is free again
