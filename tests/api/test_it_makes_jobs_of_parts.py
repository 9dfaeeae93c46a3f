"""POST /api/v1/jobs/ with `data.location` a list: the parts of one dataset, in the order given, checked by the
service as the form's lines and `submit`'s repeated --data are; the old single location as text still works."""

import pytest

from jobs.models import Job

pytestmark = pytest.mark.django_db

PARTS = ["http://localhost/part-00000.csv?X-Amz-Signature=s3cr3t", "http://localhost/part-00001.csv"]


def job_body(location) -> dict:
    return {
        "work": {"kind": "clean-table", "params": {}},
        "data": {"location": location},
        "request": {"gpus": 1, "hours": "1"},
    }


def post_job(client, body: dict, query: str = ""):
    return client.post(f"/api/v1/jobs/{query}", body, content_type="application/json")


def test_it_makes_a_job_of_parts_given_as_a_list(partner_api, online_slots):
    answer = post_job(partner_api, job_body(PARTS))
    assert answer.status_code == 201, answer.content
    job = Job.objects.get()
    assert [part["location"] for part in job.source_parts] == PARTS
    assert (job.source_uri, job.source_name) == (PARTS[0], "part-00000.csv")
    assert answer.json()["data"]["parts"] == [
        {"location": "http://localhost/part-00000.csv?…", "bytes": None, "sha256": None, "compression": None},
        {"location": "http://localhost/part-00001.csv", "bytes": None, "sha256": None, "compression": None},
    ], "shown without a signature, as the job's location is"
    assert "s3cr3t" not in partner_api.get(f"/api/v1/jobs/{job.pk}/").content.decode()


def test_a_list_of_one_location_and_text_are_one_location(partner_api, online_slots):
    for location in ([PARTS[1]], PARTS[1]):
        assert post_job(partner_api, job_body(location)).status_code == 201
    assert [job.source_parts for job in Job.objects.all()] == [[], []]
    assert {job.source_uri for job in Job.objects.all()} == {PARTS[1]}


def test_a_dry_run_lists_the_parts_it_would_stage(partner_api, online_slots):
    answer = post_job(partner_api, job_body(PARTS), "?dry_run=1")
    assert answer.status_code == 200, answer.content
    assert [part["location"] for part in answer.json()["data"]["parts"]] == [PARTS[0].split("?")[0] + "?…", PARTS[1]]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("location", "message"),
    [
        (
            [PARTS[1], PARTS[1]],
            "Part 2 (http://localhost/part-00001.csv) is part 1 again: give each part once.",
        ),
        (
            [PARTS[1], "ftp://example.com/b.csv"],
            "Part 2 (ftp://example.com/b.csv): Only http:// and https:// URLs can be fetched, not ftp: URLs.",
        ),
        ([PARTS[1], "x" * 2001], "Part 2's location is 2,001 characters; the most is 2,000."),
        ([], "Give the data one way: upload a file, or give a URL or a server path."),
        ([PARTS[1], 7], "Give a location as text, or the parts' locations as a list of text."),
        ({"first": PARTS[1]}, "Give a location as text, or the parts' locations as a list of text."),
    ],
    ids=["a part twice", "an ftp part", "a part too long", "an empty list", "a number", "an object"],
)
def test_it_refuses_a_list_naming_the_part_in_the_services_words(partner_api, online_slots, location, message):
    answer = post_job(partner_api, job_body(location))
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert (error["field"], error["message"]) == ("data" if location == [] else "data.location", message)
    assert not Job.objects.exists()


def test_it_refuses_more_parts_than_the_limit(partner_api, online_slots, settings):
    settings.E31_MAX_DATASET_PARTS = 3
    locations = [f"http://localhost/part-{n}.csv" for n in range(4)]
    error = post_job(partner_api, job_body(locations)).json()["error"]
    assert (error["field"], error["message"]) == ("data.location", "A dataset is at most 3 parts; 4 were given.")
