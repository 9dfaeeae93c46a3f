"""POST /api/v1/jobs/: a job from JSON, through the service the form and `submit` use. Its data is a finished
upload (sent over the token), a URL, an S3 URI or a server path; a refusal is the service's sentence with the
value named as docs/api.md names it; nothing is made of a refused job; creating jobs has its own rate."""

import hashlib
import uuid

import e31
import pytest
from django.urls import reverse
from e31 import cli

from jobs.models import Job, State, Upload
from jobs.staging import s3
from tests.api.loopback import file_server, upload
from tests.api.support import api_client, token_for
from tests.datasets import linear_model, table_csv
from tests.support import BROKER_AWAY, EXAMPLE, celery_sends_to, wait_for_end

DATA = EXAMPLE.read_bytes()


def job_body(data: dict | None = None, **parts) -> dict:
    body = {
        "work": {"kind": "clean-table", "params": {}},
        "data": {"location": "http://localhost:9/customers.csv"} if data is None else data,
        "request": {"gpus": 1, "hours": "1"},
    }
    return {**body, **parts}


def post_job(client, body: dict):
    return client.post("/api/v1/jobs/", body, content_type="application/json")


@pytest.mark.django_db(transaction=True)
def test_it_makes_a_job_of_an_upload_sent_over_the_token_and_runs_it(fleet, partner, partner_api, rate_card):
    upload_id = upload(partner_api, DATA, chunk=50_000)
    request = {"gpus": 2, "hours": "1", "kind": "fixed"}
    answer = post_job(partner_api, job_body({"upload": upload_id}, request=request))
    assert answer.status_code == 201, answer.content
    job = Job.objects.get()
    made = answer.json()
    assert answer["Location"] == f"/api/v1/jobs/{job.pk}/" == made["url"]
    assert (made["id"], made["data"]["source_kind"], made["data"]["name"]) == (job.pk, "upload", "customers.csv")
    assert made["request"] == {
        "gpus": 2, "hours": "1.00", "shape": "short-wide", "kind": "fixed", "max_gpus": 2, "deadline": None,
        "allow_partial": False,
    }  # fmt: skip
    assert "task_queue" not in made
    assert job.created_by == partner, "the token's user is the submitter: the receipt and the email name them"
    assert not Upload.objects.exists(), "the upload became the job's data"
    wait_for_end(job)
    assert job.state == State.SUCCEEDED, job.error
    # The answer shows the job as it was once made: the fleet may have begun staging it by then.
    assert made["state"] in job.events.values_list("state", flat=True), made["state"]
    assert job.events.order_by("at", "pk").first().state == State.SUBMITTED
    assert job.input_sha256 == hashlib.sha256(DATA).hexdigest()
    assert job.allocations.count() == 2


@pytest.mark.django_db(transaction=True)
def test_it_makes_a_job_of_a_url_and_checks_the_data_against_its_sha256(fleet, partner_api):
    with file_server(EXAMPLE.parent) as server:
        data = {"location": f"{server}/customers.csv", "sha256": hashlib.sha256(DATA).hexdigest().upper()}
        answer = post_job(partner_api, job_body(data, retention={"staged_days": 0, "output_days": 3}))
        assert answer.status_code == 201, answer.content
        job = wait_for_end(Job.objects.get())
    assert job.state == State.SUCCEEDED, job.error
    assert (job.source_kind, job.source_name, job.output_keep_days) == ("url", "customers.csv", 3)


def test_it_makes_a_sample_and_keeps_the_request_for_its_pass(partner_api, online_slots):
    body = job_body(request={"gpus": 4, "hours": 2, "shape": "short-wide"}, sample=True)
    answer = post_job(partner_api, body)
    assert answer.status_code == 201, answer.content
    job = Job.objects.get()
    assert (job.kind, job.gpus, answer.json()["kind"]) == (Job.Kind.SAMPLE, 1, "sample")
    assert job.sample_result["request"]["gpus"] == 4


def test_it_reads_parameters_s3_credentials_deadline_and_partial_output(partner_api, online_slots):
    body = job_body(
        {
            "location": "s3://partner-bucket/data/customers.csv",
            "s3_credentials": {"access_key_id": "AKIA1", "secret_access_key": " s3cr3t ", "region": "eu-west-1"},
        },
        work={"kind": "clean-table", "params": {"type_threshold": 0.9, "types": "id:int"}},
        request={"gpus": "2", "hours": 1.5, "deadline": "2099-01-01T12:00:00Z", "allow_partial": True},
    )
    answer = post_job(partner_api, body)
    assert answer.status_code == 201, answer.content
    job = Job.objects.get()
    assert job.params["type_threshold"] == 0.9
    assert (job.gpus, str(job.hours), job.deadline.year, job.allow_partial) == (2, "1.50", 2099, True)
    assert job.source_kind == "s3" and "s3cr3t" not in job.source_secret
    assert "s3cr3t" not in answer.content.decode()


@pytest.mark.django_db(transaction=True)
def test_it_takes_the_s3_credentials_as_e31_sends_them(partner_api, online_slots):
    """The body e31 builds from its --s3-* options and AWS_* variables is one the API takes: a key the
    client sent and the API did not know (an endpoint) refused every s3:// job from the command line."""
    submit = ["submit", "s3://partner-bucket/c.csv", "--work", "clean-table", "--gpus", "1", "--hours", "1"]
    args = cli.build_parser().parse_args([*submit, "--s3-key-id", "AKIA1", "--s3-secret", "s3cr3t"])
    env = {"AWS_REGION": "eu-west-1", "AWS_SESSION_TOKEN": "t0ken", "AWS_ENDPOINT_URL": "http://169.254.169.254"}
    credentials = cli.s3_credentials(args, env)
    body = e31.job_spec(
        work="clean-table", gpus=1, hours="1", location="s3://partner-bucket/c.csv", s3_credentials=credentials
    )
    answer = post_job(partner_api, body)
    assert answer.status_code == 201, answer.content
    expected = {"access_key_id": "AKIA1", "secret_access_key": "s3cr3t", "region": "eu-west-1"}
    assert s3.unseal(Job.objects.get().source_secret) == {**expected, "session_token": "t0ken"}
    body["work"]["model_s3_credentials"] = credentials
    error = post_job(partner_api, body).json()["error"]
    assert (error["field"], error["message"]) == (
        "work.model_s3_credentials",
        "The model's S3 credentials go with an s3:// model location only.",
    )
    body["work"]["model_s3_credentials"] = {**credentials, "endpoint_url": "http://169.254.169.254"}
    assert post_job(partner_api, body).json()["error"]["field"] == "work.model_s3_credentials.endpoint_url"
    assert Job.objects.count() == 1


def test_it_takes_a_model_file_as_an_upload_for_onnx_infer(partner_api, online_slots):
    model_id = upload(partner_api, linear_model(), name="scorer.onnx")
    data_id = upload(partner_api, table_csv(10), name="table.csv")
    work = {"kind": "onnx-infer", "params": {"inputs": "features=a+b+c"}, "model_upload": model_id}
    body = job_body({"upload": data_id}, work=work)
    answer = post_job(partner_api, body)
    assert answer.status_code == 201, answer.content
    job = Job.objects.get()
    assert job.model_name == "scorer.onnx" and job.model_path
    assert not Upload.objects.exists(), "both uploads were used"


def test_a_model_that_does_not_load_is_refused_in_the_services_words(partner_api, online_slots):
    model_id = upload(partner_api, b"\x08\x07garbage", name="scorer.onnx")
    body = job_body(work={"kind": "onnx-infer", "params": {}, "model_upload": model_id})
    error = post_job(partner_api, body).json()["error"]
    assert error["field"] == "work.model_upload"
    assert error["message"].startswith("scorer.onnx: the model does not load")
    assert Upload.objects.filter(pk=model_id).exists(), "a refused job leaves the upload for the next try"


GPUS, HOURS = "request.gpus", "request.hours"
ONE_WAY = "Give the data one way: upload a file, or give a URL or a server path."
REFUSED = [
    ("gpus 0", {"request": {"gpus": 0, "hours": "1"}}, GPUS, "Ask for at least one GPU, not 0."),
    ('gpus "many"', {"request": {"gpus": "many", "hours": "1"}}, GPUS, "GPUs must be a whole number, not 'many'."),
    ("gpus [1]", {"request": {"gpus": [1], "hours": 1}}, GPUS, "Give a number, or a number as text."),
    ("hours -1", {"request": {"gpus": 1, "hours": -1}}, HOURS, "Hours must be more than zero, not -1."),
    ("a shape", {"request": {"gpus": 1, "hours": 1, "shape": "tall"}}, "request.shape", "not 'tall'."),
    (
        "a past deadline",
        {"request": {"gpus": 1, "hours": 1, "deadline": "2001-01-01T00:00Z"}},
        "request.deadline",
        "The deadline, 2001-01-01 00:00 UTC, has passed; give a later one.",
    ),
    ("no request", {"request": None}, "request", "This field may not be null."),
    ("a misspelt key", {"request": {"gpu": 1, "hours": 1}}, "request.gpu", "There is no 'gpu' here"),
    ("an unknown kind", {"work": {"kind": "frobnicate"}}, "work.kind", "There is no work kind 'frobnicate'"),
    (
        "an unknown parameter",
        {"work": {"kind": "clean-table", "params": {"bogus": "1"}}},
        "work.params.bogus",
        "clean-table has no parameter 'bogus'",
    ),
    (
        "a parameter's value",
        {"work": {"kind": "clean-table", "params": {"type_threshold": "x"}}},
        "work.params.type_threshold",
        "type_threshold must be a float, not 'x'",
    ),
    ("no data", {"data": {}}, "data", ONE_WAY),
    ("an upload id", {"data": {"upload": "not-a-uuid"}}, "data.upload", "Must be a valid UUID."),
    ("an ftp URL", {"data": {"location": "ftp://example.com/a.csv"}}, "data.location", "ftp"),
    (
        "a sha256",
        {"data": {"location": "http://localhost/a.csv", "sha256": "abc"}},
        "data.sha256",
        "A SHA-256 is 64 hexadecimal digits, not 'abc'.",
    ),
    ("staged days", {"retention": {"staged_days": 9999}}, "retention.staged_days", "Keep the staged copy 0 to"),
    ("output days", {"retention": {"output_days": 0}}, "retention.output_days", "Keep the output 1 to"),
    ("an unknown key", {"gpus": 2}, "gpus", "There is no 'gpus' here; the keys are: work, data, request, retention"),
    ("a webhook to loopback", {"webhook_url": "http://127.0.0.1/h"}, "webhook_url", "127.0.0.1 is not a public"),
]


@pytest.mark.parametrize(
    ("change", "field", "message"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
def test_it_refuses_a_bad_value_naming_it_in_the_services_words(partner_api, online_slots, change, field, message):
    answer = post_job(partner_api, job_body(**change))
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("invalid", field), error
    assert message in error["message"]
    assert not Job.objects.exists()


def test_it_refuses_every_bad_value_at_once_each_by_its_name(partner_api, online_slots):
    body = job_body(
        work={"kind": "clean-table", "params": {"bogus": "1", "type_threshold": "x"}},
        request={"gpus": 0, "hours": "1.234", "deadline": "2001-01-01T00:00"},
        retention={"staged_days": 500, "output_days": "a month"},
    )
    answer = post_job(partner_api, body)
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["errors"] == [
        {
            "field": "work.params.bogus",
            "message": "clean-table has no parameter 'bogus' (it takes: type_threshold, types)",
        },
        {"field": "work.params.type_threshold", "message": "type_threshold must be a float, not 'x'"},
        {"field": "request.gpus", "message": "Ask for at least one GPU, not 0."},
        {"field": "request.hours", "message": "Hours can have at most two decimals, not 1.234."},
        {"field": "request.deadline", "message": "The deadline, 2001-01-01 00:00 UTC, has passed; give a later one."},
        {"field": "retention.staged_days", "message": "Keep the staged copy 0 to 90 days, not 500."},
        {"field": "retention.output_days", "message": "Keep the output 1 to 365 days, not 'a month'."},
    ]
    assert (error["field"], error["message"]) == tuple(error["errors"][0].values()), "the first, as before"
    assert not Job.objects.exists()


def test_a_dry_run_makes_every_check_and_nothing_else(partner_api, online_slots, rate_card):
    upload_id = upload(partner_api, DATA)
    body = job_body({"upload": upload_id}, request={"gpus": "2", "hours": 1.5, "deadline": "2099-01-01T12:00Z"})
    answer = partner_api.post("/api/v1/jobs/?dry_run=1", body, content_type="application/json")
    assert answer.status_code == 200, answer.content
    checked = answer.json()
    assert (checked["dry_run"], checked["kind"], checked["work"]) == (True, "pass", "clean-table")
    assert checked["data"] == {
        "source_kind": "upload", "name": "customers.csv", "location": "", "parts": [], "sha256": "", "format": "csv",
    }  # fmt: skip
    assert checked["request"] == {
        "gpus": 2, "hours": "1.50", "shape": "short-wide", "kind": "fixed", "max_gpus": 2,
        "deadline": "2099-01-01T12:00:00+00:00", "allow_partial": False,
    }  # fmt: skip
    assert checked["deadline_feasible"] is True, "an empty fleet of four slots: it starts at once"
    assert checked["expected_finish"] < "2099"
    assert checked["retention"] == {"staged_days": 0, "output_days": 30}
    assert checked["most_cost"] == {"gpu_hours": "3.00", "amount": "10.8000", "currency": "USD", "rate": "3.6000"}
    assert not Job.objects.exists() and Upload.objects.filter(pk=upload_id).exists(), "nothing made, nothing used"

    made = post_job(partner_api, body)
    assert made.status_code == 201, made.content
    assert made.json()["request"] == checked["request"], "the job the dry run said would be made"
    assert not Upload.objects.exists()


def test_a_dry_run_refuses_as_the_create_does(partner_api, online_slots):
    body = job_body(work={"kind": "frobnicate"}, request={"gpus": "abc", "hours": "x"})
    dry = partner_api.post("/api/v1/jobs/?dry_run=true", body, content_type="application/json")
    real = post_job(partner_api, body)
    assert dry.status_code == real.status_code == 400
    assert dry.json() == real.json()
    assert [refusal["field"] for refusal in dry.json()["error"]["errors"]] == [
        "work.kind",
        "request.gpus",
        "request.hours",
    ]
    for query, field in [("dry_run=maybe", "dry_run"), ("dryrun=1", "dryrun")]:
        answer = partner_api.post(f"/api/v1/jobs/?{query}", job_body(), content_type="application/json")
        assert (answer.status_code, answer.json()["error"]["field"]) == (400, field), "a misspelt dry run makes nothing"
    assert not Job.objects.exists()


def test_it_refuses_two_sources_at_once(partner_api, online_slots):
    upload_id = upload(partner_api, DATA)
    error = post_job(partner_api, job_body({"upload": upload_id, "location": "http://localhost/a.csv"})).json()["error"]
    assert (error["field"], error["message"]) == ("data", ONE_WAY)
    assert Upload.objects.filter(pk=upload_id).exists() and not Job.objects.exists()


def test_an_upload_of_another_organisation_is_as_good_as_none(partner_api, outsider, online_slots):
    theirs = upload(api_client(token_for(outsider)), DATA)
    answers = [post_job(partner_api, job_body({"upload": upload_id})) for upload_id in (theirs, str(uuid.uuid4()))]
    assert [answer.status_code for answer in answers] == [400, 400]
    gone = "That upload is gone: it expired or was used. Upload the file again."
    assert (
        answers[0].json()
        == answers[1].json()
        == {
            "error": {
                "code": "invalid",
                "message": gone,
                "field": "data.upload",
                "errors": [{"field": "data.upload", "message": gone}],
            }
        }
    )
    assert Upload.objects.filter(pk=theirs).exists()


def test_it_limits_the_jobs_an_organisation_makes(partner_api, online_slots, settings):
    settings.E31_API_SUBMIT_RATE = "2/hour"
    typos = [{"request": {"gpus": 0, "hours": 1}}, {"work": {"kind": "generat", "params": {}}}, {"request": None}]
    assert [post_job(partner_api, job_body(**typo)).status_code for typo in typos] == [400, 400, 400]
    assert [post_job(partner_api, job_body()).status_code for _ in range(2)] == [201, 201], "a refusal costs none"
    throttled = post_job(partner_api, job_body())
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "throttled"
    assert throttled.json()["error"]["message"].startswith(
        "Too many jobs made by one organisation (E31_API_SUBMIT_RATE is 2 per hour): try again in "
    )
    assert 3000 < int(throttled["Retry-After"]) <= 3600
    assert partner_api.get("/api/v1/me/").status_code == 200, "only making jobs is limited so"
    assert Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_job_made_while_the_task_queue_is_away_is_kept_and_says_so(partner_api, online_slots):
    with celery_sends_to(BROKER_AWAY):
        answer = post_job(partner_api, job_body())
    assert answer.status_code == 201
    assert answer.json()["task_queue"] == "unreachable"
    assert Job.objects.get().state == State.SUBMITTED, "the safety net stages it once the queue is back"


def test_the_route_is_in_the_schema(partner_api):
    schema = partner_api.get(reverse("api:schema"), HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert "post" in schema["paths"]["/api/v1/jobs/"]
    made = {"/api/v1/jobs/{id}/estimate/", "/api/v1/jobs/{id}/pass/", "/api/v1/webhooks/", "/api/v1/uploads/"}
    assert made <= set(schema["paths"])
