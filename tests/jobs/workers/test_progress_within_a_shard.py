"""A job's progress moves within a shard: each renewal of a claim after a batch writes the records its batches
have done, which the page, its live fragment and the API count with the shards done. A shard whose claim is lost
and taken again counts its records from none, so no record is counted twice."""

import itertools
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from api.representation import job_json
from jobs import lifecycle
from jobs.facts import JobFacts
from jobs.models import Job, Shard, State
from jobs.workers.runner import ShardLost, _keep_claim, claim_next
from tests.factories import make_job
from tests.support import slow_job_form, wait_for, wait_for_end

SHARD = 250


@pytest.fixture
def running_job(organisation, online_slots, rate_card):
    """A job of 1,000 records on two slots, in four shards of 250: the first one done, the others pending."""
    job = make_job(organisation, State.QUEUED, gpus=2, records_total=4 * SHARD)
    for index in range(4):
        Shard.objects.create(
            job=job, index=index, first_record=1 + SHARD * index, record_count=SHARD, first_line=2 + SHARD * index,
            start_byte=0, end_byte=10, status=Shard.Status.DONE if index == 0 else Shard.Status.PENDING,
        )  # fmt: skip
    assert lifecycle.start_hold(job, online_slots[:2])
    return Job.objects.get(pk=job.pk)


def records_done(job: Job) -> int:
    return JobFacts(Job.objects.get(pk=job.pk)).progress.records_done


def shown_on_the_page(client, job: Job) -> tuple[int, int | None]:
    """The records done and in all, as the job's live fragment shows them: in all is None while staging goes on."""
    html = client.get(f"/jobs/{job.pk}/progress/?shown=running", headers={"HX-Request": "true"}).content.decode()
    done, total = re.search(r"<dt>Records</dt><dd>([\d,]+) (?:/ ([\d,]+)|so far, of a total known once)", html).groups()
    return int(done.replace(",", "")), None if total is None else int(total.replace(",", ""))


@pytest.mark.django_db
def test_a_running_shard_counts_the_records_its_batches_have_done(running_job, online_slots, partner_client):
    shard, token = claim_next(running_job, online_slots[0])
    _keep_claim(shard, token, records_done=100)
    assert shown_on_the_page(partner_client, running_job) == (350, 1000), "the shard done, and 100 of the running one"
    progress = job_json(Job.objects.get(pk=running_job.pk))["progress"]
    assert (progress["records_done"], progress["percent"]) == (350, 35), "the API counts as the page does"


@pytest.mark.django_db
def test_a_shard_taken_again_counts_its_records_from_none(running_job, online_slots):
    first, second = online_slots[:2]
    shard, lost = claim_next(running_job, first)
    _keep_claim(shard, lost, records_done=200)
    assert records_done(running_job) == SHARD + 200

    Shard.objects.filter(pk=shard.pk).update(lease_until=timezone.now() - timedelta(seconds=1))  # its slot went quiet
    taken, token = claim_next(running_job, second)
    assert taken.pk == shard.pk and token != lost
    assert Shard.objects.get(pk=shard.pk).records_done == 0
    assert records_done(running_job) == SHARD, "the lost claim's 200 records are counted no more"

    with pytest.raises(ShardLost):
        _keep_claim(shard, lost, records_done=250)  # the first slot comes back: its count is not written
    _keep_claim(shard, token, records_done=50)
    assert records_done(running_job) == SHARD + 50


@pytest.mark.django_db
def test_a_late_renewal_with_an_older_count_takes_nothing_back(running_job, online_slots):
    """The lease keeper's thread renews with the count it last heard, which the work may have passed meanwhile."""
    shard, token = claim_next(running_job, online_slots[0])
    _keep_claim(shard, token, records_done=150)
    _keep_claim(shard, token, records_done=100)
    assert Shard.objects.get(pk=shard.pk).records_done == 150


@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_a_slot_shows_a_shard_part_done_on_the_page_and_in_the_api(fleet, partner_client):
    form = slow_job_form()  # 2,000 records, 50 a batch at 0.2 s each
    form["gpus"] = "1"  # its shards one at a time: a count past no shard's end is a shard part done
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = Job.objects.get()
    wait_for(lambda: not Job.objects.get(pk=job.pk).streaming and job.shards.exists(), what="the job cut into shards")
    sizes = job.shards.order_by("index").values_list("record_count", flat=True)
    ends = {0, *itertools.accumulate(sizes)}

    def part_done(done: int) -> bool:
        return done not in ends

    wait_for(lambda: part_done(shown_on_the_page(partner_client, job)[0]), timeout=60, what="the page to show it")
    wait_for(
        lambda: part_done(job_json(Job.objects.get(pk=job.pk))["progress"]["records_done"]),
        timeout=60,
        what="the API to show it",
    )

    wait_for_end(job, timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    assert shown_on_the_page(partner_client, job) == (2000, 2000)
    assert all(shard.records_done == shard.record_count for shard in job.shards.all()), "each shard counted whole"
    assert not job.shards.exclude(status=Shard.Status.DONE).exists()
