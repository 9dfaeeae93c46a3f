"""A page that is not there, or that failed: the portal's own pages, with a way back."""

import pytest
from django.views.defaults import server_error

from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def debug_off(settings):
    settings.DEBUG = False


def test_a_missing_page_says_so_in_the_portals_layout_with_a_way_back(debug_off, partner_client, client):
    response = partner_client.get("/no/such/page/")
    page = response.content.decode()
    assert response.status_code == 404
    assert "There is nothing here" in page and 'href="/jobs/"' in page and "Log out" in page
    assert 'href="/accounts/login/">Log in</a> to see your jobs' in client.get("/no/such/page/").content.decode()


def test_another_organisations_job_is_the_same_404_page(debug_off, organisation, partner_client, outsider_client):
    job = make_job(organisation)
    assert partner_client.get(f"/jobs/{job.pk}/").status_code == 200
    response = outsider_client.get(f"/jobs/{job.pk}/")
    assert response.status_code == 404 and "There is nothing here" in response.content.decode()


def test_a_failure_on_our_side_shows_the_portals_500_page(debug_off, rf):
    """Django renders 500.html with no context at all (the failure may lie in what builds one)."""
    response = server_error(rf.get("/jobs/"))
    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong on our side" in page and "/static/css/portal.css" in page
