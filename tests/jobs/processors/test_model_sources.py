"""Where a partner's model comes from: a file sent with the job, a server path in the organisation's staging
folder, an http(s) URL (through the SSRF guard), an s3:// object or prefix (moto's S3 server on
loopback), or an earlier job whose model is still kept. Each is stored once with its SHA-256 and
checked on submit like a file sent with the job; none needs torch."""

import functools
import hashlib
import http.server
import io
import re
import shutil
import tarfile
import threading

import pytest
from django.conf import settings
from django.core.files.storage import default_storage

from jobs import processors, services
from jobs.models import Job, Node, State
from jobs.processors.partner_model import Embed
from jobs.spec import Data, JobSpec, NamedFile, Request, Work
from jobs.staging import s3, s3_reads
from tests import hf_models
from tests.hf_models import checkable_bert, zipped_folder
from tests.jobs.processors.test_onnx_infer import output_of
from tests.support import needs_libraries_of, s3_on_loopback, wait_for_end

needs_torch = needs_libraries_of(Embed())

CREDENTIALS = {"access_key_id": "partner-key", "secret_access_key": "partner-secret-value"}


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


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return checkable_bert(tmp_path_factory.mktemp("model") / "bert")


@pytest.fixture(scope="module")
def bucket(model_folder):
    """A partner's bucket holding the model folder under a prefix and as a .zip; the operator's with
    the same folder under the organisation's own prefix and another's."""
    with s3_on_loopback() as (endpoint, client):
        for name in ("partner-models", "portal-lake"):
            client.create_bucket(Bucket=name)
        for path in sorted(model_folder.rglob("*")):
            if path.is_file():
                key = path.relative_to(model_folder).as_posix()
                client.put_object(Bucket="partner-models", Key=f"encoders/bert/{key}", Body=path.read_bytes())
                client.put_object(Bucket="portal-lake", Key=f"partner-lab/bert/{key}", Body=path.read_bytes())
                client.put_object(Bucket="portal-lake", Key=f"other-lab/bert/{key}", Body=path.read_bytes())
        client.put_object(Bucket="partner-models", Key="encoders/bert/", Body=b"")  # a console's folder marker
        client.put_object(Bucket="partner-models", Key="encoders/bert.zip", Body=zipped_folder(model_folder))
        client.put_object(Bucket="partner-models", Key="pickled/pytorch_model.bin", Body=b"\x80\x04")
        client.put_object(Bucket="partner-models", Key="pickled/config.json", Body=b"{}")
        yield endpoint, client


@pytest.fixture
def s3_settings(bucket, settings, monkeypatch):
    settings.E31_STAGING_S3_ENDPOINT_URL = bucket[0]
    settings.E31_STAGING_S3_BUCKETS = ["portal-lake"]
    for name, value in {"AWS_ACCESS_KEY_ID": "portal", "AWS_SECRET_ACCESS_KEY": "portal"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return settings


def submit(organisation, work: str = "embed", data: Data | None = None, **model) -> Job:
    data = data or Data(file=NamedFile(io.BytesIO(b"id,text\n1,good\n"), "notes.csv"))
    return services.submit_job(organisation, None, JobSpec(Work(work, **model), data, Request(1, 1)))


def tar_members(blob: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(blob)) as archive:
        return sorted(archive.getnames())


def stored(job: Job) -> bytes:
    with default_storage.open(job.model_path, "rb") as handle:
        return handle.read()


def test_a_model_comes_from_a_server_path_and_is_stored_once_with_the_job(organisation, online_slots, root, model_zip):
    (root / "encoder.zip").write_bytes(model_zip)
    job = submit(organisation, model_location=str(root / "encoder.zip"))
    assert (job.model_name, stored(job)) == ("encoder.zip", model_zip)


def test_a_model_comes_from_a_url(organisation, online_slots, tmp_path, http_server, model_zip):
    (tmp_path / "encoder.zip").write_bytes(model_zip)
    job = submit(organisation, model_location=f"{http_server}/encoder.zip?signature=secret")
    assert (job.model_name, stored(job)) == ("encoder.zip", model_zip)
    assert job.model_source == f"{http_server}/encoder.zip?…", "a pre-signed URL's signature is not kept"
    assert job.model_sha256 == hashlib.sha256(model_zip).hexdigest()


def test_a_model_comes_from_an_s3_prefix_holding_its_folder(organisation, online_slots, s3_settings, model_folder):
    data = Data(file=NamedFile(io.BytesIO(b"id,text\n1,good\n"), "notes.csv"), s3_credentials=CREDENTIALS)
    job = submit(organisation, data=data, model_location="s3://partner-models/encoders/bert/")
    files = sorted(path.relative_to(model_folder).as_posix() for path in model_folder.rglob("*") if path.is_file())
    assert (job.model_name, tar_members(stored(job))) == ("bert.tar", files)
    assert job.model_source == "s3://partner-models/encoders/bert/"
    assert job.model_sha256 == hashlib.sha256(stored(job)).hexdigest()
    assert job.source_secret == "", "the credentials read the model; the data was sent with the job"


def test_a_model_comes_from_an_s3_object_and_from_the_operators_bucket(
    organisation, online_slots, s3_settings, model_folder
):
    data = Data(file=NamedFile(io.BytesIO(b"id,text\n1,good\n"), "notes.csv"), s3_credentials=CREDENTIALS)
    job = submit(organisation, data=data, model_location="s3://partner-models/encoders/bert.zip")
    assert (job.model_name, stored(job)) == ("bert.zip", zipped_folder(model_folder))
    own = submit(organisation, model_location="s3://portal-lake/partner-lab/bert/")
    assert own.model_name == "bert.tar" and own.model_sha256


def test_a_model_on_s3_is_read_with_its_own_credentials_and_the_data_with_its(
    organisation, online_slots, s3_settings, bucket, monkeypatch
):
    """A model in another account than the data's comes with credentials of its own; without them the
    data's read it too. The model's are used at submit only and kept nowhere."""
    _, partner = bucket
    partner.put_object(Bucket="partner-models", Key="notes.csv", Body=b"id,text\n1,good\n")
    own = {"access_key_id": "model-key", "secret_access_key": "model-secret-value"}
    used, real = [], s3_reads.client
    monkeypatch.setattr(s3_reads, "client", lambda credentials: used.append(credentials) or real(credentials))
    data = Data(location="s3://partner-models/notes.csv", s3_credentials=CREDENTIALS)
    model = "s3://partner-models/encoders/bert/"
    job = submit(organisation, data=data, model_location=model, model_s3_credentials=own)
    assert own in used and CREDENTIALS not in used[used.index(own) :], "the model read with its own"
    assert s3.unseal(job.source_secret) == CREDENTIALS, "the data staged with the data's"
    assert "model-secret-value" not in str(Job.objects.filter(pk=job.pk).values().get())
    used.clear()
    submit(organisation, data=data, model_location=model)
    assert used == [CREDENTIALS], "without its own, the model is read with the data's"
    sent = Data(file=NamedFile(io.BytesIO(b"id,text\n1,good\n"), "notes.csv"), s3_credentials=CREDENTIALS)
    own_field, own_refused = "model_s3_credentials", "The model's S3 credentials go with an s3:// model location"
    refusals = [
        (sent, {"model_location": model, "model_s3_credentials": own}, "data", "S3 credentials go with an s3://"),
        (None, {"model_location": "/srv/bert.zip", "model_s3_credentials": own}, own_field, own_refused),
        (data, {"model_s3_credentials": own}, own_field, own_refused),
    ]
    for given, work, field, message in refusals:
        with pytest.raises(services.SubmitError) as refused:
            submit(organisation, data=given, **work)
        said = [(refusal.field, refusal.message) for refusal in refused.value.refusals]
        assert any(on == field and text.startswith(message) for on, text in said), said
    assert Job.objects.count() == 2


def test_a_model_on_s3_is_refused_with_what_went_wrong(organisation, online_slots, s3_settings, settings):
    with_credentials = Data(file=NamedFile(io.BytesIO(b"id,text\n1,good\n"), "notes.csv"), s3_credentials=CREDENTIALS)
    cases = [
        ("s3://portal-lake/other-lab/bert/", None, "your organisation reads only under s3://portal-lake/partner-lab/"),
        ("s3://partner-models/encoders/bert/", None, "Give credentials that can read s3://partner-models/"),
        ("s3://partner-models/missing/", with_credentials, "s3://partner-models/missing/ holds no objects."),
        ("s3://partner-models/missing.zip", with_credentials, "s3://partner-models/missing.zip does not exist"),
        ("s3://partner-models/pickled/", with_credentials, "pickled.tar: the weights are pickle files"),
    ]
    for location, data, message in cases:
        with pytest.raises(services.SubmitError, match=re.escape(message)) as refused:
            submit(organisation, data=data, model_location=location)
        assert refused.value.field == "model"
    settings.E31_MODEL_MAX_FILES = 3
    with pytest.raises(services.SubmitError, match="holds more than 3 files for a model"):
        submit(organisation, data=with_credentials, model_location="s3://partner-models/encoders/bert/")
    settings.E31_MAX_MODEL_BYTES = 1000
    with pytest.raises(services.SubmitError, match=r"more than the 1,000-byte .* limit for a model"):
        submit(organisation, data=with_credentials, model_location="s3://partner-models/encoders/bert.zip")
    with pytest.raises(services.SubmitError, match=r"^S3 credentials go with an s3:// location only\.$"):
        submit(organisation, data=with_credentials, model_location="/srv/not-s3.zip")
    assert not Job.objects.exists()


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
    with pytest.raises(services.SubmitError, match=f"^There is no job {first.pk} in your organisation to take"):
        submit(other_organisation, model_from_job=first.pk)
    with pytest.raises(services.SubmitError, match=f"^There is no job {first.pk + 99} in your organisation"):
        submit(organisation, model_from_job=first.pk + 99)
    with pytest.raises(services.SubmitError, match="the model is not a sequence-classification model"):
        submit(organisation, "classify", model_from_job=first.pk)
    Job.objects.filter(pk__in=[first.pk, again.pk]).update(state=State.FAILED, staged_path="")
    assert not services.kept_models(organisation).exists(), "retention no longer keeps it"
    with pytest.raises(services.SubmitError, match=rf"^Job {first.pk}'s model is no longer kept: .* Send the model"):
        submit(organisation, model_from_job=first.pk)
    assert again.model_source == f"job {first.pk}", "an uploaded model chosen again says from which job"
    Job.objects.filter(pk=first.pk).update(model_path="")
    with pytest.raises(services.SubmitError, match=rf"^Job {first.pk} brought no model\.$"):
        submit(organisation, model_from_job=first.pk)


def test_the_form_shows_the_model_fields_once_and_offers_kept_models(
    partner_client, organisation, online_slots, model_zip
):
    first = submit(organisation, model=NamedFile(io.BytesIO(model_zip), "encoder.zip"))
    page = partner_client.get("/jobs/new/").content.decode()
    assert page.count('name="model"') == 1 and page.count('name="model_location"') == 1
    assert f'<option value="{first.pk}">encoder.zip, from job {first.pk} (embed)</option>' in page
    assert 'data-work="classify embed generate onnx-infer"' in page
    assert page.count('name="model_s3_secret_access_key"') == 1


def test_the_form_names_the_models_credentials_when_they_have_nothing_to_read(partner_client, online_slots):
    """The model's own S3 credentials with a model that is not on S3: refused on their own field, nothing
    made, the secret not shown back."""
    form = {
        "work": "embed",
        "location": "https://example.com/notes.csv",
        "model_location": "https://example.com/bert.zip",
        "model_s3_access_key_id": "AKIA2",
        "model_s3_secret_access_key": "model-secret-value",
        "gpus": "1",
        "hours": "1",
        "shape": "short-wide",
        "retention": "delete",
    }
    answer = partner_client.post("/jobs/new/", form)
    assert answer.status_code == 400
    assert answer.context["form"].errors == {
        "model_s3_access_key_id": ["The model's S3 credentials go with an s3:// model location only."]
    }
    assert "model-secret-value" not in answer.content.decode() and not Job.objects.exists()


@needs_torch
@pytest.mark.django_db(transaction=True)
def test_a_job_runs_a_model_from_an_s3_prefix_and_its_manifest_lists_it(
    fleet, organisation, partner_client, bucket, s3_settings, tmp_path
):
    folder = hf_models.bert(tmp_path / "encoder")
    _, client = bucket
    for path in sorted(folder.rglob("*")):
        client.put_object(Bucket="portal-lake", Key=f"partner-lab/encoder/{path.name}", Body=path.read_bytes())
    data = Data(file=NamedFile(io.BytesIO(b"id,text\n1,good\n2,the invoice was paid late\n"), "notes.csv"))
    job = submit(organisation, data=data, model_location="s3://portal-lake/partner-lab/encoder/")
    sha256 = hashlib.sha256(stored(job)).hexdigest()  # the staged copy's, deleted with the model when the job ends
    job = wait_for_end(job)
    assert job.state == State.SUCCEEDED, job.error
    rows, _, manifest = output_of(partner_client, job)
    assert [row["_record"] for row in rows] == [1, 2]
    assert manifest["model"] == {
        "name": "encoder.tar",
        "source": "s3://portal-lake/partner-lab/encoder/",
        "sha256": sha256,
        "folder": {
            "bytes": sum(path.stat().st_size for path in folder.iterdir()),
            "files": len(list(folder.iterdir())),
        },
    }
