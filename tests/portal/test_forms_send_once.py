"""Every form that makes something carries a one-time token: posted twice (a double-click, a reload, Back and
Submit) it makes one thing and the second post lands on it with a note; with fields that changed it makes
nothing and offers them as a new one; a form sent back with errors keeps its token for the corrected post."""

import re
import threading

import pytest
from django.test import Client

from api.models import ApiToken
from jobs.models import Job, Upload
from portal.models import Application
from tests.factories import finished_sample
from tests.jobs.uploads.tus import job_with_upload, upload_whole
from tests.support import client_for, job_form

ONCE = re.compile(r'name="once" value="([0-9a-f]{32})"')


def token_on(page) -> str:
    tokens = ONCE.findall(page.content.decode())
    assert len(tokens) == 1, tokens
    return tokens[0]


def text_of(page) -> str:
    return page.content.decode()


@pytest.mark.django_db
def test_the_job_form_posted_twice_makes_one_job_and_lands_on_it(partner_client, online_slots):
    once = token_on(partner_client.get("/jobs/new/"))
    first = partner_client.post("/jobs/new/", {**job_form(), "once": once})
    job = Job.objects.get()
    assert first.status_code == 302 and first["Location"] == f"/jobs/{job.pk}/"
    again = partner_client.post("/jobs/new/", {**job_form(), "once": once}, follow=True)
    assert again.redirect_chain == [(f"/jobs/{job.pk}/", 302)]
    assert f"This form was sent already: it made job #{job.pk}, shown here." in text_of(again)
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_double_click_on_the_job_form_makes_one_job_and_both_posts_land_on_it(partner, online_slots):
    form = job_with_upload(upload_whole(client_for(partner)))  # the data, sent by the page's resumable upload
    form["once"] = token_on(client_for(partner).get("/jobs/new/"))
    answers = []

    def click():
        answers.append(client_for(partner).post("/jobs/new/", form))

    clicks = [threading.Thread(target=click) for _ in range(2)]
    for each in clicks:
        each.start()
    for each in clicks:
        each.join()
    job = Job.objects.get()
    assert [(answer.status_code, answer["Location"]) for answer in answers] == [(302, f"/jobs/{job.pk}/")] * 2
    assert not Upload.objects.exists(), "the upload became the job's data, once"


@pytest.mark.django_db
def test_back_then_submit_with_other_fields_makes_nothing_and_offers_a_new_job(partner_client, online_slots):
    form = job_with_upload(upload_whole(partner_client))
    once = token_on(partner_client.get("/jobs/new/"))
    assert partner_client.post("/jobs/new/", {**form, "once": once}).status_code == 302
    first = Job.objects.get()

    changed = {**form, "gpus": "1", "once": once}
    offered = partner_client.post("/jobs/new/", changed)
    assert offered.status_code == 409
    page = text_of(offered)
    assert f'It made <a href="/jobs/{first.pk}/">job #{first.pk}</a>.' in page
    assert "Submit as a new job" in page and Job.objects.count() == 1
    fresh = token_on(offered)
    assert fresh != once
    assert '<input type="hidden" name="gpus" value="1">' in page

    second_upload = upload_whole(partner_client)
    again = partner_client.post("/jobs/new/", {**job_with_upload(second_upload), "gpus": "1", "once": fresh})
    assert again.status_code == 302 and Job.objects.count() == 2


@pytest.mark.django_db
def test_a_form_sent_back_with_errors_keeps_its_token_for_the_corrected_post(partner_client, online_slots):
    once = token_on(partner_client.get("/jobs/new/"))
    refused = partner_client.post("/jobs/new/", {**job_form(gpus="0"), "once": once})
    assert refused.status_code == 400 and token_on(refused) == once
    assert partner_client.post("/jobs/new/", {**job_form(), "once": once}).status_code == 302
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_a_post_without_a_token_is_taken_as_it_always_was(partner_client, online_slots):
    for _ in range(2):
        assert partner_client.post("/jobs/new/", job_form()).status_code == 302
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_the_pass_form_posted_twice_makes_one_pass(partner_client, organisation, online_slots):
    sample = finished_sample(organisation)
    once = token_on(partner_client.get(f"/jobs/{sample.pk}/"))
    form = {"gpus": "1", "hours": "1", "retention": "delete", "keep_days": "7", "once": once}
    first = partner_client.post(f"/jobs/{sample.pk}/pass/", form)
    assert first.status_code == 302, first.content.decode()[-2000:]
    full = Job.objects.get(sample=sample)
    again = partner_client.post(f"/jobs/{sample.pk}/pass/", form)
    assert first["Location"] == again["Location"] == f"/jobs/{full.pk}/"
    assert Job.objects.filter(sample=sample).count() == 1


@pytest.mark.django_db
def test_the_token_form_posted_twice_makes_one_token(partner_client):
    once = token_on(partner_client.get("/account/tokens/"))
    made = partner_client.post("/account/tokens/", {"name": "laptop", "once": once})
    assert made.status_code == 200 and ApiToken.objects.count() == 1
    again = partner_client.post("/account/tokens/", {"name": "laptop", "once": once}, follow=True)
    assert again.redirect_chain == [("/account/tokens/", 302)]
    assert "it made the token “laptop”, shown once when it was made" in text_of(again)
    assert ApiToken.objects.count() == 1


@pytest.mark.django_db
def test_the_application_posted_twice_is_one_application():
    browser = Client()
    once = token_on(browser.get("/design-partners/apply/"))
    ada = {"name": "Ada", "email": "ada@lab.example", "organisation": "Lab", "dataset": "x", "work": "y"}
    assert (
        browser.post("/design-partners/apply/", {**ada, "once": once})["Location"] == "/design-partners/apply/thanks/"
    )
    again = browser.post("/design-partners/apply/", {**ada, "once": once}, follow=True)
    assert "This form was sent already: it made your application" in text_of(again)
    assert "Thank you, Ada" in text_of(again)
    assert Application.objects.count() == 1
