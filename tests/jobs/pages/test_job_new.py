"""The job form: bad data and bad requests get a clear error, the service's sentence under its field, and
nothing is stored or queued."""

import html
import re

import pytest
from django.core.files.storage import default_storage
from django.test import override_settings

from jobs.models import Allocation, Job
from jobs.scheduling import fleet
from tests.support import EXAMPLE, job_form

pytestmark = pytest.mark.django_db


def post(client, **fields):
    return client.post("/jobs/new/", job_form(**fields))


def assert_refused(response, message: str):
    assert response.status_code == 400
    assert html.escape(message) in response.content.decode()
    assert not Job.objects.exists()
    assert not Allocation.objects.exists()


def test_it_shows_the_form_with_the_fleet(partner_client, online_slots):
    page = partner_client.get("/jobs/new/").content.decode()
    assert "The fleet has 4 CPU slots online" in page
    assert "clean-table" in page and "Short-wide" in page and "Long-narrow" in page


def test_it_offers_server_paths_only_where_the_operator_set_staging_roots(partner_client, online_slots, settings):
    assert "staging folder on the server" in partner_client.get("/jobs/new/").content.decode()
    settings.E31_STAGING_ROOTS = []
    page = partner_client.get("/jobs/new/").content.decode()
    assert "Or a URL or s3:// URI" in page and "server" not in page.split("An http(s) URL")[1].split("</small>")[0]


def test_it_accepts_a_valid_job(partner_client, online_slots):
    response = post(partner_client)
    job = Job.objects.get()
    assert response.status_code == 302
    assert (job.gpus, job.hours, job.state, job.retention_days) == (2, 1, "submitted", 0)
    assert list(job.events.values_list("state", flat=True)) == ["submitted"]


def test_it_lays_the_request_out_long_and_narrow(partner_client, online_slots):
    post(partner_client, gpus="4", hours="1.5", shape="long-narrow")
    job = Job.objects.get()
    assert (job.gpus, job.hours, job.shape) == (1, 6, "long-narrow")


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (b"", "empty.csv", "The file is empty."),
        (b"   \n\n ", "blank.csv", "nothing but whitespace"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image.csv", "This is a binary file"),
        (b"caf\xe9,bar\n1,2\n", "latin1.csv", "not UTF-8 text (byte 0xe9 at offset 3)"),
        (b"Dear team,\nplease find the data attached. Thanks!\nBest wishes\n", "letter.txt", "neither CSV"),
        (b'[{"a": 1}, {"a": 2}]', "array.json", "This is a JSON array"),
        (b'{"a": 1,\n', "broken.jsonl", "line 1 is not valid JSON"),
    ],
)
def test_it_refuses_data_that_is_not_a_table(partner_client, online_slots, content, name, message):
    assert_refused(post(partner_client, data=content, name=name), message)


@override_settings(E31_MAX_UPLOAD_BYTES=100)
def test_it_refuses_an_upload_over_the_limit(partner_client, online_slots):
    assert_refused(post(partner_client, data=b"a,b\n" + b"1,2\n" * 100), "larger than the 100\xa0bytes upload limit")


@pytest.mark.parametrize(
    ("gpus", "hours", "message"),
    [
        ("0", "1", "Ask for at least one GPU, not 0."),
        ("-3", "1", "Ask for at least one GPU, not -3."),
        ("two", "1", "GPUs must be a whole number, not 'two'."),
        ("", "1", "This field is required."),
        ("5", "1", "The fleet has 4 CPU slots online; ask for 4 or fewer."),
        ("1", "0", "Hours must be more than zero, not 0."),
        ("1", "-1", "Hours must be more than zero, not -1."),
        ("1", "soon", "Hours must be a number, not 'soon'."),
        ("1", "NaN", "Hours must be a number, not 'NaN'."),
        ("1", "1.005", "Hours can have at most two decimals, not 1.005."),
        ("1", "73", "A job can run at most 72 hours; this asks for 73."),
        ("1", "100000", "A job can run at most 72 hours; this asks for 100000."),
        ("1", "1e9", "Hours must be a number, not '1e9'."),
    ],
)
def test_it_refuses_a_request_the_fleet_cannot_meet(partner_client, online_slots, gpus, hours, message):
    assert_refused(post(partner_client, gpus=gpus, hours=hours), message)


def test_it_takes_the_shortest_time_limit_a_job_can_ask_for(partner_client, online_slots):
    response = post(partner_client, gpus="1", hours="0.01")
    assert response.status_code == 302, "0.01 h is the least a job may ask for, not one refused as below it"


def test_it_refuses_a_long_narrow_layout_past_the_time_limit(partner_client, online_slots):
    assert_refused(post(partner_client, gpus="4", hours="20", shape="long-narrow"), "at most 72 hours")


def test_it_refuses_when_no_gpu_is_online(partner_client):
    assert_refused(post(partner_client), "No GPUs are online right now")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("param-clean-table-type_threshold", "most", "type_threshold must be a float, not 'most'"),
        ("param-clean-table-type_threshold", "0.1", "type_threshold must be at least 0.5, not 0.1"),
        ("param-clean-table-types", "age", "types entry 'age' must be column:type"),
        ("work", "mine-bitcoin", "There is no work kind 'mine-bitcoin'; the kinds are: classify, clean-table, "),
    ],
)
def test_it_refuses_bad_work_parameters(partner_client, online_slots, field, value, message):
    response = post(partner_client, **{field: value})
    assert_refused(response, message)
    assert message in " ".join(response.context["form"].errors[field]), "shown by its field"


def test_it_asks_how_many_days_to_keep(partner_client, online_slots):
    assert_refused(post(partner_client, retention="keep", keep_days=""), "Say how many days to keep the staged copy.")
    assert_refused(
        post(partner_client, retention="keep", keep_days="400"), "Keep the staged copy 0 to 90 days, not 400."
    )
    assert_refused(post(partner_client, output_days="0"), "Keep the output 1 to 365 days, not 0.")
    assert_refused(post(partner_client, output_days="366"), "Keep the output 1 to 365 days, not 366.")
    assert_refused(post(partner_client, output_days="a month"), "Keep the output 1 to 365 days, not 'a month'.")


@pytest.mark.parametrize(("given", "kept"), [("", 30), ("7", 7), ("365", 365)])
def test_it_keeps_the_output_the_days_asked_or_thirty(partner_client, online_slots, given, kept):
    assert post(partner_client, output_days=given).status_code == 302
    assert Job.objects.get().output_keep_days == kept


def test_it_stores_the_upload_for_staging(partner_client, online_slots):
    post(partner_client)
    job = Job.objects.get()
    assert job.source_path.startswith("uploads/")
    with default_storage.open(job.source_path) as stored:
        assert stored.read(2) == b"id"


@pytest.mark.django_db
def test_the_work_parameters_read_in_words_with_the_name_the_api_takes(partner_client, online_slots):
    page = partner_client.get("/jobs/new/").content.decode()
    assert ">Type threshold</label>" in page and "(type_threshold in the API and the e31 client)" in page
    assert ">Max side</label>" in page and ">Top values</label>" in page
    assert ">type_threshold</label>" not in page


def test_a_partner_without_a_dataset_downloads_the_example(partner_client, client):
    page = partner_client.get("/jobs/new/").content.decode()
    assert 'href="/jobs/example/customers.csv" download>customers.csv</a>' in page
    response = partner_client.get("/jobs/example/customers.csv")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="customers.csv"'
    assert b"".join(response.streaming_content) == EXAMPLE.read_bytes()
    assert client.get("/jobs/example/customers.csv")["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
@pytest.mark.parametrize("days", ["500", "-1", "abc", "99999999999999999999", "٣"])
def test_every_error_is_told_at_once_and_each_once(partner_client, online_slots, days):
    form = job_form(gpus="0", deadline="2020-01-01T00:00", retention="keep", keep_days=days)
    page = html.unescape(partner_client.post("/jobs/new/", form).content.decode())
    told = re.findall(r'class="errorlist[^"]*"[^>]*>\s*<li>(.*?)</li>', page, re.S)
    shown = days if days.lstrip("-").isdecimal() and days.isascii() else repr(days)
    assert told == [
        "Ask for at least one GPU, not 0.",
        "The deadline, 2020-01-01 00:00 UTC, has passed; give a later one.",
        f"Keep the staged copy 0 to 90 days, not {shown}.",
    ], "the days refused, not a second sentence asking for them"
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_kinds_the_fleet_runs_come_first_and_the_cost_sits_by_the_submit_button(
    partner_client, online_slots, rate_card
):
    page = partner_client.get("/jobs/new/").content.decode()
    kinds = re.findall(r'name="work" value="([\w-]+)"', page)
    cannot = [kind for kind in kinds if kind not in fleet().work_kinds]
    assert cannot and kinds[-len(cannot) :] == cannot, f"the ones no node runs last: {kinds}"
    assert page.count("No online node can run it now.") == len(cannot)
    bar = page[page.index('class="actions submit-bar"') :]
    assert bar.index("this job costs at most") < bar.index("Submit the job</button>") < bar.index("</div>")
