"""The job form's resumable upload in a real browser (Chromium): it survives a dropped network and a
reload, and the finished upload becomes the job's data; a file changed since part of it was sent starts
over rather than resume onto the old bytes.

Needs Debian's `chromium`; CI installs it and sets E31_BROWSER_TESTS=1, so there it cannot skip."""

import hashlib
import os
import re

import pytest

from jobs.models import Job, State, Upload
from portal.units import size
from tests.support import logged_in_page, needs_chromium, state_is, wait_for, wait_for_end

pytestmark = [
    pytest.mark.django_db(transaction=True),
    needs_chromium,
]

SLOW = {"offline": False, "latency": 20, "downloadThroughput": -1, "uploadThroughput": 400_000}
OFFLINE = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
FAST = {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}


class Network:
    """The page's network, made slow, cut or fast again through the DevTools protocol."""

    def __init__(self, page):
        self.session = page.context.new_cdp_session(page)
        self.session.send("Network.enable")

    def __call__(self, conditions: dict) -> None:
        self.session.send("Network.emulateNetworkConditions", conditions)


def test_an_upload_survives_a_dropped_network_and_a_reload(
    browser, live_server, settings, fleet, partner, dataset
):  # fmt: skip
    settings.E31_UPLOAD_CHUNK_BYTES = 128 * 1024
    page = logged_in_page(browser, live_server.url)
    page.goto(f"{live_server.url}/jobs/new/")
    network = Network(page)
    network(SLOW)
    page.set_input_files("input[name=data]", str(dataset))
    wait_for(lambda: Upload.objects.filter(offset__gt=0).exists(), what="a first chunk confirmed")
    rate = re.compile(r"of 2\.\d\xa0MB · \d+\.\d\xa0(kB|MB)/s · ")
    wait_for(lambda: rate.search(page.inner_text("#upload-status")), what="the upload's size and rate in kB or MB")

    network(OFFLINE)
    state_is(page, "waiting")
    stopped_at = Upload.objects.get().offset
    assert f"The upload stopped at {size(stopped_at)};" in page.inner_text("#upload-status")
    network(SLOW)
    state_is(page, "uploading")
    wait_for(lambda: Upload.objects.get().offset > stopped_at, what="the upload to go on")

    page.reload()
    network(FAST)
    page.set_input_files("input[name=data]", str(dataset))
    state_is(page, "done")
    assert f"records.csv is uploaded ({size(dataset.stat().st_size)})" in page.inner_text("#upload-status")
    assert page.input_value("input[name=data]").endswith("records.csv"), "the field still names the file"
    assert Upload.objects.count() == 1, "the reload resumed the upload instead of starting another"
    upload = Upload.objects.get()
    assert upload.complete and upload.path.read_bytes() == dataset.read_bytes()

    page.check("input[name=work][value=clean-table]")
    page.click("button.primary")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    assert job.input_sha256 == hashlib.sha256(dataset.read_bytes()).hexdigest()
    assert not Upload.objects.exists()


def test_a_file_changed_since_part_of_it_was_sent_starts_over(browser, live_server, settings, partner, dataset):
    settings.E31_UPLOAD_CHUNK_BYTES = 128 * 1024
    page = logged_in_page(browser, live_server.url)
    page.goto(f"{live_server.url}/jobs/new/")
    network = Network(page)
    network(SLOW)
    page.set_input_files("input[name=data]", str(dataset))
    wait_for(lambda: Upload.objects.filter(offset__gt=0).exists(), what="a first chunk confirmed")
    page.reload()
    earlier = Upload.objects.get()
    before = dataset.stat()
    edited = bytearray(dataset.read_bytes())
    edited[edited.index(b"record number 7 ")] = ord("R")  # in the first chunk, which the portal has
    dataset.write_bytes(edited)
    os.utime(dataset, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same name, size and date to the page

    page.set_input_files("input[name=data]", str(dataset))
    told = "(started over: the file changed since part of it was uploaded)"
    wait_for(lambda: told in page.inner_text("#upload-status"), what="the page to say why it starts over")
    network(FAST)
    state_is(page, "done")
    upload = Upload.objects.get()
    assert upload.pk != earlier.pk, "the earlier upload was discarded, not resumed"
    assert upload.complete and upload.path.read_bytes() == edited
    assert "records.csv is uploaded" in page.inner_text("#upload-status")
