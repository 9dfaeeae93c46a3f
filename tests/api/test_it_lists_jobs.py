"""GET /api/v1/jobs/: the organisation's jobs, newest first, in pages, filtered by state, kind, work and
creation time; a filter, page or size that is not one of its kind is refused with 400, naming it."""

from datetime import UTC, datetime, timedelta

import pytest

from jobs.models import Job, State
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs(organisation):
    """Five jobs created a day apart, from 2026-11-01: two queued, a running sample, two succeeded."""
    states = [State.QUEUED, State.QUEUED, State.RUNNING, State.SUCCEEDED, State.SUCCEEDED]
    made = []
    for day, state in enumerate(states):
        job = make_job(organisation, state, kind=Job.Kind.SAMPLE if state == State.RUNNING else Job.Kind.PASS)
        Job.objects.filter(pk=job.pk).update(created=datetime(2026, 11, 1 + day, 12, tzinfo=UTC))
        made.append(job)
    return made


def ids(answer) -> list[int]:
    assert answer.status_code == 200, answer.content
    return [job["id"] for job in answer.json()["results"]]


def test_it_lists_newest_first_in_pages(jobs, partner_api):
    newest_first = [job.pk for job in reversed(jobs)]
    first = partner_api.get("/api/v1/jobs/?page_size=2").json()
    assert first["count"] == 5 and first["previous"] is None
    assert [job["id"] for job in first["results"]] == newest_first[:2]
    assert first["next"].endswith("/api/v1/jobs/?page=2&page_size=2")
    assert ids(partner_api.get("/api/v1/jobs/?page=3&page_size=2")) == newest_first[4:]
    assert ids(partner_api.get("/api/v1/jobs/")) == newest_first, "50 to a page when no size is given"


def test_it_filters_by_state_kind_work_and_time(jobs, partner_api):
    queued = {jobs[0].pk, jobs[1].pk}
    assert set(ids(partner_api.get("/api/v1/jobs/?state=queued"))) == queued
    assert ids(partner_api.get("/api/v1/jobs/?kind=sample")) == [jobs[2].pk]
    assert len(ids(partner_api.get("/api/v1/jobs/?work=clean-table"))) == 5
    assert ids(partner_api.get("/api/v1/jobs/?work=embed-text")) == []
    after = ids(partner_api.get("/api/v1/jobs/?created_after=2026-11-03T00:00:00Z"))
    assert after == [jobs[4].pk, jobs[3].pk, jobs[2].pk]
    between = "/api/v1/jobs/?created_after=2026-11-02&created_before=2026-11-04&state=queued"
    assert ids(partner_api.get(between)) == [jobs[1].pk]
    assert ids(partner_api.get("/api/v1/jobs/?created_before=2026-11-02T12:00:00%2B00:00")) == [jobs[0].pk]


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ("state=runing", "state", '"runing" is not a valid choice'),
        ("kind=full", "kind", '"full" is not a valid choice'),
        ("created_after=yesterday", "created_after", "Datetime has wrong format"),
        ("created_before=2026-13-01", "created_before", "Datetime has wrong format"),
        ("status=running", "status", "'status' is no parameter of this route"),
        ("page=0", "page", "A page is a whole number from 1, not '0'"),
        ("page=two", "page", "not 'two'"),
        ("page=%D9%A1", "page", "not '١'"),
        ("page=9", "page", "Page 9 is past the last page, 1"),
        ("page_size=101", "page_size", "from 1 to 100, not '101'"),
        ("page_size=-1", "page_size", "not '-1'"),
        ("page_size=", "page_size", "not ''"),
    ],
)
def test_it_refuses_a_bad_value_naming_it(jobs, partner_api, query, field, words):
    answer = partner_api.get(f"/api/v1/jobs/?{query}")
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid" and error["field"] == field
    assert words in error["message"], error["message"]


def test_a_job_in_the_list_is_the_job_as_its_own_route_gives_it(jobs, partner_api):
    listed = partner_api.get("/api/v1/jobs/?kind=sample").json()["results"][0]
    assert listed == partner_api.get(f"/api/v1/jobs/{jobs[2].pk}/").json()


def test_an_empty_organisation_has_one_empty_page(partner_api):
    assert partner_api.get("/api/v1/jobs/").json() == {"count": 0, "next": None, "previous": None, "results": []}


def test_created_times_are_read_in_utc_when_no_offset_is_given(jobs, partner_api):
    naive = (datetime(2026, 11, 5, 11, tzinfo=UTC) + timedelta(minutes=0)).strftime("%Y-%m-%dT%H:%M:%S")
    assert ids(partner_api.get(f"/api/v1/jobs/?created_after={naive}")) == [jobs[4].pk]
