"""A dataset of several parts (URLs one a line in the form): staged joined in the order given and run through
a real worker, each part's bytes and SHA-256 recorded; a part that fails once tried again on its own; and
every way the parts can be wrong refused with one sentence naming the part, before anything is held."""

import bz2
import gzip
import hashlib
import http.server
import io
import json
import shutil
import threading
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.core.files.storage import default_storage
from django.test import override_settings
from django.utils.html import escape

from jobs.models import Job, State
from jobs.staging import parts
from jobs.staging.progress import StagingProgress
from tests.factories import make_job
from tests.support import client_for, job_form, wait_for_end


def _parquet() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": [1, 2], "text": ["a", "b"]}), sink)
    return sink.getvalue()


MANY = {f"/many-{n:05}.jsonl": b"".join(b'{"id": %d}\n' % i for i in range(n * 10, n * 10 + 10)) for n in range(11)}
CSV_PARTS = {
    "/part-00000.csv": b"id,text\n" + b"".join(b"%d,row %d\n" % (n, n) for n in range(0, 300)),
    # a header ending in CRLF is the same header; a last line without its newline still ends a record
    "/part-00001.csv": b"id,text\r\n" + b"".join(b"%d,row %d\n" % (n, n) for n in range(300, 700)).rstrip(b"\n"),
    "/part-00002.csv": b"id,text\n" + b"".join(b"%d,row %d\n" % (n, n) for n in range(700, 1000)),
}
OTHER = {
    "/other-header.csv": b"id,name\n1,a\n",
    "/records.jsonl": b'{"id": 1, "text": "a"}\n',
    "/empty.csv": b"",
    "/part-00000.csv.gz": gzip.compress(CSV_PARTS["/part-00000.csv"]),
    "/part-00001.csv.bz2": bz2.compress(CSV_PARTS["/part-00001.csv"]),
    "/cut-short.csv.gz": gzip.compress(CSV_PARTS["/part-00002.csv"])[:-9],
    "/table.parquet": _parquet(),
}


BODIES = {**CSV_PARTS, **OTHER, **MANY}


class _Parts(http.server.BaseHTTPRequestHandler):
    """Serves the parts; a path in `faults` answers its next GETs as listed there: 503, or half the body then
    a hang-up (its resume, with no Range support here, gets the whole body again, which a fetch refuses)."""

    bodies = BODIES
    faults: dict[str, list[str]] = {}
    asked: Counter = Counter()

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        self.asked[path] += 1
        fault = self.faults.get(path, []) and self.faults[path].pop(0)
        if path not in self.bodies or fault == "503":
            self.send_error(503 if fault else 404)
            return
        body = self.bodies[path]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if fault == "half" else body)
        self.close_connection = fault == "half"

    def log_message(self, *args):
        return


@pytest.fixture
def parts_server():
    _Parts.faults, _Parts.asked = {}, Counter()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Parts)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://localhost:{server.server_address[1]}"
    server.shutdown()


def submit(client, *locations: str):
    form = job_form(location="\n".join(locations))
    del form["data"]
    return client.post("/jobs/new/", form)


def staged(client, *locations: str) -> Job:
    response = submit(client, *locations)
    assert response.status_code == 302, response.context["form"].errors
    return wait_for_end(Job.objects.get())


def refused(client, *locations: str) -> list[str]:
    response = submit(client, *locations)
    assert response.status_code == 400 and not Job.objects.exists()
    return response.context["form"].errors["location"]


def never_queued(job: Job) -> None:
    assert job.state == State.FAILED
    assert not job.allocations.exists()
    assert not job.events.filter(state=State.QUEUED).exists(), "refused before it could be held"


@pytest.mark.django_db(transaction=True)
def test_it_stages_the_parts_joined_in_order_and_runs_them(fleet, partner_client, parts_server):
    names = ["/part-00000.csv", "/part-00001.csv", "/part-00002.csv"]
    job = staged(partner_client, *(f"{parts_server}{name}?X-Amz-Signature=s3cr3t" for name in names))
    assert job.state == State.SUCCEEDED, job.error
    assert job.source_uri == f"{parts_server}/part-00000.csv?…", "the first part, as one location is recorded"
    assert job.parts_shown == [
        {
            "location": f"{parts_server}{name}?…",
            "bytes": len(CSV_PARTS[name]),
            "sha256": hashlib.sha256(CSV_PARTS[name]).hexdigest(),
            "compression": None,
        }
        for name in names
    ]
    assert "s3cr3t" not in json.dumps(job.source_parts), "the signatures are wiped once staged"
    as_sent = b"".join(CSV_PARTS[name] for name in names)
    assert job.input_sha256 == hashlib.sha256(as_sent).hexdigest()
    assert job.records_total == job.records_out == 1000 and job.records_rejected == 0
    with default_storage.open(f"{job.output_path}/output.parquet", "rb") as output:
        ids = pq.read_table(output).column("id").to_pylist()
    assert sorted(ids) == list(range(1000)), "every record once, one header for all the parts"
    with default_storage.open(f"{job.output_path}/manifest.json", "rb") as handle:
        assert json.load(handle)["input"]["parts"] == job.parts_shown
    page = partner_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "part-00001.csv" in page and hashlib.sha256(CSV_PARTS["/part-00001.csv"]).hexdigest() in page


@pytest.mark.django_db(transaction=True)
def test_it_tries_a_part_that_fails_again_on_its_own(fleet, partner_client, parts_server):
    """Part 2's head is read, then its download answers 503, then it hangs up half-way and cannot resume: each
    time only part 2 is fetched again, and the bytes it had handed on are skipped, not joined twice."""
    _Parts.faults = {"/part-00001.csv": ["ok", "503", "half"]}
    names = ["/part-00000.csv", "/part-00001.csv", "/part-00002.csv"]
    job = staged(partner_client, *(f"{parts_server}{name}" for name in names))
    assert job.state == State.SUCCEEDED, job.error
    assert job.records_out == 1000
    assert _Parts.asked["/part-00001.csv"] == 5, "its head, the 503, the half, its refused resume, the whole"
    assert _Parts.asked["/part-00000.csv"] == _Parts.asked["/part-00002.csv"] == 2, "the others: head and body"
    assert job.input_sha256 == hashlib.sha256(b"".join(CSV_PARTS[name] for name in names)).hexdigest()


@pytest.mark.django_db(transaction=True)
def test_it_joins_compressed_parts_uncompressed_and_records_them_as_sent(fleet, partner_client, parts_server):
    """A gzip part, a bzip2 part and a plain one, each known by its bytes."""
    names = ["/part-00000.csv.gz", "/part-00001.csv.bz2", "/part-00002.csv"]
    job = staged(partner_client, *(f"{parts_server}{name}" for name in names))
    assert job.state == State.SUCCEEDED, job.error
    assert job.records_out == 1000
    assert [(part["bytes"], part["sha256"], part["compression"]) for part in job.parts_shown] == [
        (len(BODIES[name]), hashlib.sha256(BODIES[name]).hexdigest(), compression)
        for name, compression in zip(names, ("gzip", "bzip2", None), strict=True)
    ]
    as_sent = b"".join(BODIES[name] for name in names)
    assert job.input_sha256 == hashlib.sha256(as_sent).hexdigest()


@pytest.mark.django_db(transaction=True)
def test_it_names_a_compressed_part_cut_short(fleet, partner_client, parts_server):
    """The last part's gzip data lacks its last 9 bytes: a whole part, so its head already shows it."""
    job = staged(partner_client, f"{parts_server}/part-00000.csv", f"{parts_server}/cut-short.csv.gz")
    never_queued(job)
    assert job.error.startswith(f"Staging failed: Part 2 of 2 ({parts_server}/cut-short.csv.gz): the gzip data ends")


@pytest.mark.django_db(transaction=True)
def test_it_fails_naming_a_part_that_fails_every_try(fleet, partner_client, parts_server):
    """Part 2's head is read, then its download answers 503 three times. Part 1 may have been joined, and the
    pass begun on it, by then: either way the job fails with the part's sentence."""
    _Parts.faults = {"/part-00001.csv": ["ok", "503", "503", "503"]}
    job = staged(partner_client, *(f"{parts_server}{name}" for name in CSV_PARTS))
    assert job.state == State.FAILED
    assert (
        f"Part 2 of 3 ({parts_server}/part-00001.csv) could not be staged: localhost answered HTTP 503 Service "
        "Unavailable." in job.error
    ), job.error
    assert _Parts.asked["/part-00001.csv"] == 1 + parts.ATTEMPTS


@pytest.mark.django_db(transaction=True)
def test_it_names_a_part_that_answers_404(fleet, partner_client, parts_server):
    job = staged(partner_client, f"{parts_server}/part-00000.csv", f"{parts_server}/part-00099.csv")
    never_queued(job)
    assert job.error == (
        f"Staging failed: Part 2 of 2 ({parts_server}/part-00099.csv) could not be staged: localhost answered "
        "HTTP 404 Not Found."
    )
    assert _Parts.asked["/part-00099.csv"] == 1, "a 404 is not asked again"


@pytest.mark.django_db(transaction=True)
def test_it_refuses_a_csv_part_whose_header_differs_by_name(fleet, partner_client, parts_server):
    """Part 2's header is `id,name` where part 1's is `id,text`."""
    job = staged(partner_client, f"{parts_server}/part-00000.csv", f"{parts_server}/other-header.csv")
    never_queued(job)
    assert job.error == (
        f"Staging failed: Part 2 of 2 ({parts_server}/other-header.csv) has the CSV header 'id,name', not part 1's "
        "'id,text': the parts of one dataset share one header."
    )


@pytest.mark.parametrize(
    ("parts", "error"),
    [
        (
            ("part-00000.csv", "records.jsonl"),
            "Part 2 of 2 ({server}/records.jsonl) is JSONL and part 1 is CSV: the parts of one dataset are of one "
            "format.",
        ),
        (
            ("part-00000.csv", "table.parquet"),
            "Part 2 of 2 ({server}/table.parquet) is Parquet: parts are joined only as CSV or JSONL; give such a "
            "dataset as one file (or Parquet parts under one S3 prefix).",
        ),
        (("empty.csv", "part-00000.csv"), "Part 1 of 2 ({server}/empty.csv): The file is empty."),
    ],
    ids=["csv-then-jsonl", "csv-then-parquet", "an-empty-part"],
)
@pytest.mark.django_db(transaction=True)
def test_it_refuses_parts_of_different_formats_before_anything_is_held(
    fleet, partner_client, parts_server, parts, error
):
    job = staged(partner_client, *(f"{parts_server}/{part}" for part in parts))
    never_queued(job)
    assert job.error == "Staging failed: " + error.format(server=parts_server)


@pytest.mark.django_db
def test_it_refuses_a_part_given_twice(partner_client, online_slots):
    """The same URL twice, once with a signature in its query: the same part."""
    assert refused(
        partner_client, "http://localhost/a.csv", "http://localhost/b.csv", "http://localhost/a.csv?sig=1"
    ) == ["Part 3 (http://localhost/a.csv?…) is part 1 again: give each part once."]


@pytest.mark.django_db
@override_settings(E31_MAX_DATASET_PARTS=2)
def test_it_refuses_more_parts_than_the_limit(partner_client, online_slots):
    locations = [f"http://localhost/part-{n}.csv" for n in range(3)]
    assert refused(partner_client, *locations) == ["A dataset is at most 2 parts; 3 were given."]


@pytest.mark.django_db
def test_it_refuses_parts_of_different_kinds_and_names_a_part_refused(partner_client, online_slots):
    """A URL then a server path; a URL then a loopback address the SSRF guard refuses."""
    assert refused(partner_client, "http://localhost/a.csv", "/srv/data/b.csv") == [
        "Part 2 (/srv/data/b.csv) is a server path and part 1 is a URL: the parts of one dataset are all URLs, "
        "all S3 objects or all server paths."
    ]
    assert refused(partner_client, "http://localhost/a.csv", "http://127.0.0.1/b.csv") == [
        "Part 2 (http://127.0.0.1/b.csv): 127.0.0.1 is not a public address; only public hosts can be reached."
    ]


@pytest.mark.django_db
def test_the_form_takes_one_url_a_line_and_one_line_as_one_location(partner_client, online_slots):
    """Blank lines and CRLF line ends, as a browser sends a textarea, are no parts."""
    form = job_form(location="http://localhost/a.csv\r\n\r\nhttp://localhost/b.csv\r\n")
    del form["data"]
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = Job.objects.get()
    assert job.source_parts == [{"location": "http://localhost/a.csv"}, {"location": "http://localhost/b.csv"}]
    assert (job.source_uri, job.source_kind, job.source_name) == ("http://localhost/a.csv", "url", "a.csv")
    assert "2 parts, from a.csv on (url)" in partner_client.get(f"/jobs/{job.pk}/").content.decode()
    Job.objects.all().delete()
    form = job_form(location="http://localhost/a.csv")
    del form["data"]
    assert partner_client.post("/jobs/new/", form).status_code == 302
    assert Job.objects.get().source_parts == [], "one location is no dataset of parts"


@pytest.mark.django_db
def test_it_reads_more_parts_than_it_fetches_at_once_in_the_order_given(organisation, parts_server):
    """Eleven JSONL parts, named from the last to the first, the last without its final newline."""
    names = sorted(MANY, reverse=True)
    bodies = [MANY[name] for name in names]
    bodies[-1] = bodies[-1].rstrip(b"\n")
    _Parts.bodies = {**BODIES, names[-1]: bodies[-1]}
    locations = [{"location": f"{parts_server}{name}"} for name in names]
    job = make_job(organisation, State.STAGING, staging_claim="c", source_kind=Job.Source.URL, source_parts=locations)
    assert len(names) > parts.PARALLEL
    try:
        with parts.joined(job, StagingProgress(job.pk, "c"), open_path=None) as stream:
            joined = stream.read()
    finally:
        _Parts.bodies = BODIES
    assert joined == b"".join(bodies) + b"\n", "in the order given; a newline after a part that ends without one"
    assert stream.raw_sha256() == hashlib.sha256(b"".join(bodies)).hexdigest()
    assert stream.sent_size == stream.raw_bytes == sum(map(len, bodies)), "progress counts to the parts' sizes as sent"
    assert [part["bytes"] for part in Job.objects.get(pk=job.pk).source_parts] == [len(body) for body in bodies]
    assert set(_Parts.asked.values()) == {2}, "each part once for its head, once for its bytes"


@pytest.mark.django_db
def test_a_job_of_parts_submitted_again_asks_for_its_parts(partner_client, online_slots):
    """Its parts one a line, as they were typed; a part's signature, wiped once staged, is asked for again."""
    form = job_form(location="http://localhost/a.csv\nhttp://localhost/b.csv")
    del form["data"]
    partner_client.post("/jobs/new/", form)
    job = Job.objects.get()
    again = partner_client.get(f"/jobs/new/?again={job.pk}")
    assert again.context["form"]["location"].value() == "http://localhost/a.csv\nhttp://localhost/b.csv"
    Job.objects.filter(pk=job.pk).update(source_parts=[{"location": "http://localhost/a.csv?…"}] * 2)
    again = partner_client.get(f"/jobs/new/?again={job.pk}")
    assert not again.context["form"]["location"].value()
    assert escape("Give the parts' locations again: their signatures are not kept.") in again.content.decode()


@pytest.fixture
def folder():
    """A folder in the partner organisation's own staging folder."""
    folder = settings.E31_STAGING_ROOTS[0] / "partner-lab" / "export"
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(settings.E31_STAGING_ROOTS[0])


@pytest.mark.django_db(transaction=True)
def test_it_stages_a_server_folder_as_its_files_in_name_order(fleet, partner_client, folder):
    """Written last to first, with Spark's _SUCCESS and a hidden .crc beside them, which are left out."""
    names = sorted(name for name in CSV_PARTS)
    for name in reversed(names):
        (folder / name.lstrip("/")).write_bytes(CSV_PARTS[name])
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / ".part-00000.csv.crc").write_bytes(b"\x00")
    job = staged(partner_client, str(folder))
    assert job.state == State.SUCCEEDED, job.error
    assert [part["location"] for part in job.parts_shown] == [f"{folder}{name}" for name in names]
    assert job.records_out == 1000


@pytest.mark.django_db
def test_it_refuses_an_empty_server_folder(partner_client, online_slots, folder):
    (folder / "_SUCCESS").write_bytes(b"")
    assert refused(partner_client, str(folder)) == [f"{folder} holds no files to stage."]


@pytest.mark.django_db
def test_the_console_shows_the_parts_without_their_signatures(partner_client, operator, online_slots):
    form = job_form(location="http://localhost/a.csv?X-Amz-Signature=s3cr3t\nhttp://localhost/b.csv")
    del form["data"]
    partner_client.post("/jobs/new/", form)
    job = Job.objects.get()
    page = client_for(operator).get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "http://localhost/a.csv?…" in page and "http://localhost/b.csv" in page
    assert "s3cr3t" not in page
