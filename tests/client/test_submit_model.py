"""`e31 submit --model`: a model folder packed and uploaded (resumably: the same folder is the same
upload), a model the portal fetches from a URL, and `--model-from` an earlier job's kept model."""

import functools
import http.server
import threading

import pytest

from jobs.models import Job
from jobs.processors.partner_model import Embed
from tests.hf_models import checkable_bert, zipped_folder
from tests.support import needs_libraries_of, wait_for_end

NOTES = b"id,text\n1,the invoice was paid late\n2,good\n"
EMBED = ("submit", "notes.csv", "--work", "embed", "--hours", "1")


@pytest.fixture
def http_server(tmp_path):
    """A plain HTTP server on loopback serving tmp_path/served, reached as `localhost` (allowed in tests)."""
    (tmp_path / "served").mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "served"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tmp_path / "served", f"http://localhost:{server.server_address[1]}"
    server.shutdown()


@needs_libraries_of(Embed())
def test_it_packs_a_model_folder_uploads_it_once_and_reuses_a_kept_model(e31, fleet, portal):
    (e31.folder / "notes.csv").write_bytes(NOTES)
    checkable_bert(e31.folder / "bert")
    mark = len(portal.lines())
    refused = e31(*EMBED, "--model", "bert", "--gpus", "0")
    assert refused.returncode == 1 and refused.stderr.endswith("e31: Ask for at least one GPU, not 0.\n")
    assert "Packing the model folder bert into a .tar to upload." in refused.stderr
    assert portal.requests("POST", "/api/v1/uploads/", after=mark) == [], "refused by the dry run: nothing uploaded"
    (e31.folder / "notes.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    late = e31(*EMBED, "--model", "bert", "--gpus", "1")  # the data is read when the job is made, past the uploads
    assert late.returncode == 1 and late.stderr.endswith("e31: This is a binary file, not CSV or JSONL text.\n")
    (e31.folder / "notes.csv").write_bytes(NOTES)
    mark = len(portal.lines())
    # Its staged copy kept, so its model is too: the job may end before the next submit chooses the model again.
    accepted = e31(*EMBED, "--model", "bert", "--gpus", "1", "--keep-days", "1")
    assert accepted.returncode == 0, accepted.stderr
    assert "Using the earlier upload of bert.tar" in accepted.stderr, "the same folder is the same upload"
    assert len(portal.requests("PATCH", "/api/v1/uploads/", after=mark, at_least=1)) == 1, "the new data's chunk alone"
    job = Job.objects.get(pk=int(accepted.stdout))
    assert (job.model_name, job.model_source, len(job.model_sha256)) == ("bert.tar", "upload", 64)
    assert not list((e31.folder.parent / "cache" / "e31" / "models").rglob("*.tar")), "the packed copy is removed"

    again = e31(*EMBED, "--model-from", str(job.pk), "--gpus", "1")
    assert again.returncode == 0, again.stderr
    reused = Job.objects.get(pk=int(again.stdout))
    assert (reused.model_path, reused.model_sha256) == (job.model_path, job.model_sha256)
    both = e31(*EMBED, "--model", "bert", "--model-from", str(job.pk), "--gpus", "1")
    assert both.stderr == "e31: Give the model one way: --model or --model-from.\n"
    missing = e31(*EMBED, "--model", "no-such-folder", "--gpus", "1")
    assert missing.stderr.startswith("e31: There is no model file or folder no-such-folder")
    for done in (job, reused):
        wait_for_end(done)  # before the next test: its fleet is free again


@needs_libraries_of(Embed())
def test_it_gives_the_portal_a_models_url_to_fetch(e31, fleet, http_server, tmp_path):
    served, url = http_server
    (served / "bert.zip").write_bytes(zipped_folder(checkable_bert(tmp_path / "bert")))
    (e31.folder / "notes.csv").write_bytes(NOTES)
    done = e31(*EMBED, "--model", f"{url}/bert.zip", "--gpus", "1")
    assert done.returncode == 0, done.stderr
    job = Job.objects.get(pk=int(done.stdout))
    assert (job.model_name, job.model_source) == ("bert.zip", f"{url}/bert.zip")
    refused = e31(*EMBED, "--model", "http://127.0.0.1:9/bert.zip", "--gpus", "1")
    assert refused.returncode == 1 and "127.0.0.1" in refused.stderr, "the portal's SSRF guard said no"
    wait_for_end(job)
