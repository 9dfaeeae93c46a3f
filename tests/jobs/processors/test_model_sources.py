"""Where a partner's model comes from: a file sent with the job, a server path in the organisation's staging
folder, an http(s) URL (through the SSRF guard), or an earlier job whose model is still kept. Each is
checked on submit like a file sent with the job; none needs torch."""

import functools
import http.server
import io
import re
import shutil
import threading

import pytest
from django.conf import settings
from django.core.files.storage import default_storage

from jobs import processors, services
from jobs.models import Job, Node, State
from jobs.spec import Data, JobSpec, NamedFile, Request, Work
from tests.hf_models import checkable_bert, zipped_folder


@pytest.fixture
def online_slots(online_slots):
    """Four online slots on a node that reports every kind."""
    Node.objects.filter(name="fake-node").update(work_kinds=[processor.name for processor in processors.available()])
    return online_slots


@pytest.fixture
def model_zip(tmp_path) -> bytes:
    return zipped_folder(checkable_bert(tmp_path / "bert"))


@pytest.fixture
def root():
    """The partner organisation's own staging folder."""
    folder = settings.E31_STAGING_ROOTS[0] / "partner-lab"
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    shutil.rmtree(settings.E31_STAGING_ROOTS[0])


@pytest.fixture
def http_server(tmp_path):
    """A plain HTTP server on loopback serving tmp_path, reached as `localhost` (allowed in tests)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://localhost:{server.server_address[1]}"
    server.shutdown()


def submit(organisation, work: str = "embed", **model) -> Job:
    data = Data(file=NamedFile(io.BytesIO(b"id,text\n1,good\n"), "notes.csv"))
    return services.submit_job(organisation, None, JobSpec(Work(work, **model), data, Request(1, 1)))


def stored(job: Job) -> bytes:
    with default_storage.open(job.model_path, "rb") as handle:
        return handle.read()


def test_a_model_comes_from_a_server_path_and_is_stored_once_with_the_job(organisation, online_slots, root, model_zip):
    (root / "encoder.zip").write_bytes(model_zip)
    job = submit(organisation, model_location=str(root / "encoder.zip"))
    assert (job.model_name, stored(job)) == ("encoder.zip", model_zip)


def test_a_model_comes_from_a_url(organisation, online_slots, tmp_path, http_server, model_zip):
    (tmp_path / "encoder.zip").write_bytes(model_zip)
    job = submit(organisation, model_location=f"{http_server}/encoder.zip")
    assert (job.model_name, stored(job)) == ("encoder.zip", model_zip)


def test_a_model_location_is_refused_as_a_datas_would_be(organisation, online_slots, root, model_zip, settings):
    (root / "encoder.zip").write_bytes(model_zip)
    cases = [
        ("/etc/passwd", "/etc/passwd is not a readable file in your staging folders"),
        ("http://127.0.0.1:9/encoder.zip", "127.0.0.1"),
        ("s3://bucket/encoder.zip", "Give credentials that can read s3://bucket/"),
        ("https://models.example/\u202eenc.zip", "The location contains U+202E"),
    ]
    for location, message in cases:
        with pytest.raises(services.SubmitError, match=re.escape(message)) as refused:
            submit(organisation, model_location=location)
        assert refused.value.field == "model"
    with pytest.raises(services.SubmitError, match=r"^clean-table takes no model file\.$"):
        submit(organisation, "clean-table", model_location="http://localhost:9/never-fetched.zip")
    settings.E31_MAX_MODEL_BYTES = 1000
    with pytest.raises(services.SubmitError, match="is larger than the 1,000-byte limit for a model"):
        submit(organisation, model_location=str(root / "encoder.zip"))
    with pytest.raises(services.SubmitError, match="Give the model one way"):
        submit(organisation, model=NamedFile(io.BytesIO(model_zip), "a.zip"), model_location=str(root / "encoder.zip"))
    assert not Job.objects.exists()


def test_a_model_used_before_is_chosen_again_while_it_is_kept(
    organisation, other_organisation, online_slots, model_zip
):
    first = submit(organisation, model=NamedFile(io.BytesIO(model_zip), "encoder.zip"))
    assert list(services.kept_models(organisation)) == [first]
    again = submit(organisation, model_from_job=first.pk)
    assert (again.model_path, again.model_name) == (first.model_path, "encoder.zip"), "the same stored model"
    with pytest.raises(services.SubmitError, match=f"Job {first.pk} has no model kept for you"):
        submit(other_organisation, model_from_job=first.pk)
    with pytest.raises(services.SubmitError, match="the model is not a sequence-classification model"):
        submit(organisation, "classify", model_from_job=first.pk)
    Job.objects.filter(pk__in=[first.pk, again.pk]).update(state=State.FAILED, staged_path="")
    assert not services.kept_models(organisation).exists(), "retention no longer keeps it"
    with pytest.raises(services.SubmitError, match=f"Job {first.pk} has no model kept for you"):
        submit(organisation, model_from_job=first.pk)


def test_the_form_shows_the_model_fields_once_and_offers_kept_models(
    partner_client, organisation, online_slots, model_zip
):
    first = submit(organisation, model=NamedFile(io.BytesIO(model_zip), "encoder.zip"))
    page = partner_client.get("/jobs/new/").content.decode()
    assert page.count('name="model"') == 1 and page.count('name="model_location"') == 1
    assert f'<option value="{first.pk}">encoder.zip, from job {first.pk} (embed)</option>' in page
    assert 'data-work="classify embed generate onnx-infer"' in page
