"""The jobs page: the organisation's jobs a page at a time, newest first, filtered by state, kind and month,
found by number or data name; a query string that means nothing is set aside with a sentence, never a 500."""

import re
from datetime import UTC, datetime, timedelta

import pytest

from billing.models import LedgerEntry
from jobs.models import Job, State
from tests.api.support import entry
from tests.factories import make_job
from tests.support import client_for

pytestmark = pytest.mark.django_db

JOBS = "/jobs/"


def _rows(page: str) -> list[str]:
    """The job numbers the page lists, in order."""
    return [cell.split('"')[0] for cell in page.split('<td><a href="/jobs/')[1:]]


def _jobs(organisation, count: int, **fields) -> list[Job]:
    return [make_job(organisation, **fields) for _ in range(count)]


def test_it_pages_the_jobs_newest_first(organisation, partner_client):
    jobs = _jobs(organisation, 53)
    first = partner_client.get(JOBS).content.decode()
    assert _rows(first) == [f"{job.pk}/" for job in reversed(jobs)][:50]
    assert "Page 1 of 2 · 1–50 of 53 jobs" in first
    assert 'href="?page=2" rel="next"' in first
    second = partner_client.get(JOBS, {"page": "2"}).content.decode()
    assert _rows(second) == [f"{job.pk}/" for job in reversed(jobs[:3])]
    assert "Page 2 of 2 · 51–53 of 53 jobs" in second and 'href="?page=1" rel="prev"' in second


def test_it_filters_by_state_kind_and_month(organisation, partner_client):
    queued, running = make_job(organisation, State.QUEUED), make_job(organisation, State.RUNNING)
    sample = make_job(organisation, kind=Job.Kind.SAMPLE)
    november = make_job(organisation)
    Job.objects.filter(pk=november.pk).update(created=datetime(2026, 11, 30, 23, 59, tzinfo=UTC))

    assert _rows(partner_client.get(JOBS, {"state": "queued"}).content.decode()) == [f"{queued.pk}/"]
    assert _rows(partner_client.get(JOBS, {"state": "running"}).content.decode()) == [f"{running.pk}/"]
    assert _rows(partner_client.get(JOBS, {"kind": "sample"}).content.decode()) == [f"{sample.pk}/"]
    assert _rows(partner_client.get(JOBS, {"month": "2026-11"}).content.decode()) == [f"{november.pk}/"]
    page = partner_client.get(JOBS, {"state": "succeeded", "month": "2026-11"}).content.decode()
    assert "No job matches these filters." in page and not _rows(page)


def test_its_pager_keeps_the_filters(organisation, partner_client):
    _jobs(organisation, 51, state=State.QUEUED)
    page = partner_client.get(JOBS, {"state": "queued", "q": "a.csv"}).content.decode()
    assert 'href="?state=queued&amp;q=a.csv&amp;page=2" rel="next"' in page
    assert 'hx-get="/jobs/?state=queued&amp;q=a.csv"' in page, "the rows refresh as filtered"


def test_it_finds_a_job_by_number_or_data_name(organisation, partner_client):
    customers = make_job(organisation, source_name="customers-2026.csv")
    other = make_job(organisation, source_name="orders.parquet")
    assert _rows(partner_client.get(JOBS, {"q": f"#{other.pk}"}).content.decode()) == [f"{other.pk}/"]
    assert _rows(partner_client.get(JOBS, {"q": str(customers.pk)}).content.decode()) == [f"{customers.pk}/"]
    assert _rows(partner_client.get(JOBS, {"q": "CUSTOMERS"}).content.decode()) == [f"{customers.pk}/"]
    assert _rows(partner_client.get(JOBS, {"q": "50%_"}).content.decode()) == [], "no wildcards"


def test_an_outsiders_job_never_shows(organisation, other_organisation, partner_client):
    mine = make_job(organisation, State.QUEUED, source_name="shared-name.csv")
    theirs = make_job(other_organisation, State.QUEUED, source_name="shared-name.csv")
    for query in ({}, {"q": f"#{theirs.pk}"}, {"q": "shared-name"}, {"state": "queued"}, {"page": "2"}):
        page = partner_client.get(JOBS, query).content.decode()
        assert f"/jobs/{theirs.pk}/" not in page, query
    assert _rows(partner_client.get(JOBS, {"q": "shared-name"}).content.decode()) == [f"{mine.pk}/"]
    assert partner_client.get(f"/jobs/{theirs.pk}/").status_code == 404


@pytest.mark.parametrize(
    ("query", "note"),
    [
        ({"page": "abc"}, "There is no page &#x27;abc&#x27;; showing the first."),
        ({"page": "-1"}, "There is no page &#x27;-1&#x27;; showing the first."),
        ({"page": "0"}, "There is no page &#x27;0&#x27;; showing the first."),
        ({"page": "２"}, "There is no page &#x27;２&#x27;; showing the first."),
        ({"page": "99999999999999999999999"}, "There is only 1 page; showing the last."),
        ({"state": "bogus"}, "There is no state &#x27;bogus&#x27;; showing every state."),
        ({"kind": "pass'><script>"}, "There is no kind &quot;pass&#x27;&gt;&lt;script&gt;&quot;; showing every kind."),
        ({"month": "2026-13"}, "&#x27;2026-13&#x27; is not a month (YYYY-MM); showing every month."),
        ({"month": "2026-00"}, "&#x27;2026-00&#x27; is not a month (YYYY-MM); showing every month."),
        ({"month": "9999-12"}, "&#x27;9999-12&#x27; is not a month (YYYY-MM); showing every month."),
        ({"month": "0000-01"}, "&#x27;0000-01&#x27; is not a month (YYYY-MM); showing every month."),
        ({"month": "nov"}, "&#x27;nov&#x27; is not a month (YYYY-MM); showing every month."),
    ],
)
def test_a_query_string_that_means_nothing_is_set_aside_and_said(organisation, partner_client, query, note):
    job = make_job(organisation)
    response = partner_client.get(JOBS, query)
    assert response.status_code == 200
    page = response.content.decode()
    assert f'<p class="flash warning">{note}</p>' in page
    assert _rows(page) == [f"{job.pk}/"], "the list is shown without it"


def test_a_search_for_a_number_past_any_id_finds_nothing(organisation, partner_client):
    make_job(organisation)
    response = partner_client.get(JOBS, {"q": "9" * 30})
    assert response.status_code == 200 and not _rows(response.content.decode())


def test_its_queries_do_not_grow_with_the_jobs(organisation, partner, django_assert_max_num_queries):
    client = client_for(partner)
    _jobs(organisation, 120, state=State.RUNNING)
    with django_assert_max_num_queries(12):
        page = client.get(JOBS, {"page": "2"}).content.decode()
    assert len(_rows(page)) == 50


def test_each_row_shows_what_the_job_processed_cost_and_took(organisation, partner_client):
    done = make_job(organisation, State.SUCCEEDED, records_total=5000, records_out=4990, records_rejected=10)
    cancelled = make_job(organisation, State.CANCELLED, records_total=5000, records_out=1180, records_rejected=20)
    queued = make_job(organisation, State.QUEUED, records_total=5000)
    Job.objects.filter(pk=done.pk).update(ended_at=done.created + timedelta(minutes=3, seconds=20))
    entry(done, ended=done.created + timedelta(minutes=3))
    entry(done, ended=done.created + timedelta(minutes=3), kind=LedgerEntry.Kind.CORRECTION, amount="-1.5")
    page = partner_client.get(JOBS).content.decode()

    def cells(job) -> list[str]:
        """Its row's Records, Cost and Took."""
        row = page.split(f'<td><a href="/jobs/{job.pk}/">')[1].split("</tr>")[0]
        return re.findall(r"<td[^>]*>([^<]*)</td>", row)[-4:-1]

    assert cells(done) == ["5,000", "2.10 USD", "3 min 20 s"], "its entries added up, a credit too"
    assert cells(cancelled)[0] == "1,200 of 5,000", "what it processed, not the dataset's size"
    assert cells(queued) == ["5,000", "–", "–"]


def test_the_empty_list_offers_the_example_dataset(partner_client):
    page = partner_client.get(JOBS).content.decode()
    assert 'href="/jobs/example/customers.csv" download>customers.csv</a>' in page
