"""The operators' overview of the fleet and the queue, in the partners' look: the jobs running with their width and
progress, the queue in order with when each job is expected to start, the organisations against their quotas, the
nodes with their slots online, held and used. Staff only."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import LedgerEntry
from jobs import lifecycle, queue_figures
from jobs.facts import JobFacts
from jobs.models import Allocation, Gpu, Job, Node, Shard, State
from jobs.queue_figures import QueueFigures
from portal.models import Organisation
from tests.api.support import entry
from tests.factories import make_job
from tests.support import assert_for_operators_who_may_view_jobs, client_for

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/jobs/job/overview/"


def _row(page: str, link: str) -> str:
    """The table row that links to `link` (a job's or an organisation's page in the console)."""
    rows = [row for row in re.findall(r"<tr[^>]*>.*?</tr>", page, re.S) if f'href="{link}"' in row]
    assert len(rows) == 1, f"one row links to {link}"
    return re.sub(r"\s+", " ", rows[0])


def _job_row(page: str, job: Job) -> str:
    return _row(page, f"/admin/jobs/job/{job.pk}/change/")


def _running(organisation, slots, gpus: int, **fields) -> Job:
    """A job that started an hour ago on `slots`, its 400 records in four shards: two done, one running 40 records
    into its claim, one waiting."""
    started = timezone.now() - timedelta(hours=1)
    job = make_job(organisation, State.RUNNING, gpus=gpus, hours=2, started_at=started, records_total=400, **fields)
    for slot in slots:
        Allocation.objects.create(job=job, gpu=slot, held_from=started)
    for index, (status, done) in enumerate(
        [(Shard.Status.DONE, 0), (Shard.Status.DONE, 0), (Shard.Status.RUNNING, 40), (Shard.Status.PENDING, 0)]
    ):
        Shard.objects.create(
            job=job, index=index, first_record=index * 100 + 1, record_count=100, first_line=index * 100 + 2,
            start_byte=index, end_byte=index + 1, status=status, records_done=done,
        )  # fmt: skip
    return job


def test_it_shows_the_running_jobs_with_their_width_and_progress(
    organisation, other_organisation, online_slots, operator
):
    fixed = _running(organisation, online_slots[:2], gpus=2)
    flexible = _running(other_organisation, online_slots[2:3], gpus=2, request=Job.Request.FLEXIBLE, max_gpus=3)
    short = _running(organisation, online_slots[3:], gpus=2)
    page = client_for(operator).get(OVERVIEW).content.decode()

    row = _job_row(page, fixed)
    assert "Partner Lab" in row and '<span class="state running">Running</span>' in row
    assert '<td data-label="Width" class="num"><strong>2</strong> of 2</td>' in row
    assert 'Fixed, <span class="when">2 × 2 h</span>' in row
    assert 'value="60"' in row and "240 of 400" in row and "· 60 %" in row, "two shards done and 40 records of one"
    assert f"{fixed.time_limit_at():%Y-%m-%d %H:%M}" in row

    row = _job_row(page, flexible)
    assert "Other Lab" in row and "<strong>1</strong> of 3</td>" in row, "narrower than its cap, as it may run"
    assert 'Flexible, <span class="when">2 × 2 h</span><small>up to 3 wide</small>' in row
    shown = datetime.strptime(
        re.search(r'expected <span class="when">([\d-]+ [\d:]+)</span>', row)[1], "%Y-%m-%d %H:%M"
    )
    expected = JobFacts(Job.objects.get(pk=flexible.pk)).expected_finish
    assert abs(shown.replace(tzinfo=UTC) - expected) < timedelta(minutes=2), "as its page expects it, by its rate"

    row = _job_row(page, short)
    assert '<strong class="warn">1</strong> of 2<small>1 lost</small>' in row, "a fixed job that lost a slot"


def test_it_lists_the_queue_in_order_with_each_jobs_expected_start_and_deadline(organisation, online_slots, operator):
    now = timezone.now()
    deadline = datetime(2026, 12, 31, 12, 0, tzinfo=UTC)

    def queued(minutes_ago: int, **fields) -> Job:
        return make_job(organisation, State.QUEUED, gpus=2, hours=1, queued_at=now - timedelta(minutes=minutes_ago),
                        **fields)  # fmt: skip

    expected = queued(30, expected_start=datetime(2026, 12, 24, 9, 15, tzinfo=UTC), deadline=deadline)
    on_hold = queued(20)
    lifecycle.put_on_hold(on_hold, reason="quota review")
    estimated = queued(10, request=Job.Request.FLEXIBLE)
    later = datetime(2026, 12, 24, 11, 45, tzinfo=UTC)
    stored = {expected.pk: QueueFigures(1, 0, None), on_hold.pk: QueueFigures(2, 0, None)}
    queue_figures.write({**stored, estimated.pk: QueueFigures(3, 1, later)}, at=now)

    page = client_for(operator).get(OVERVIEW).content.decode()
    places = [page.index(f"/admin/jobs/job/{job.pk}/change/") for job in (expected, on_hold, estimated)]
    assert places == sorted(places), "in queue order"
    row = _job_row(page, expected)
    assert '<td data-label="Place" class="num">1</td>' in row
    assert '<span class="when">2026-12-24 09:15</span> <small>told at submit</small>' in row, "no latest start stored"
    assert '<td data-label="Deadline"><span class="when">2026-12-31 12:00</span></td>' in row
    row = _job_row(page, on_hold)
    assert '<td data-label="Place" class="num">2</td>' in row and "On hold" in row and "quota review" in row
    row = _job_row(page, estimated)
    assert '<td data-label="Place" class="num">3</td>' in row and "Flexible" in row
    assert '<span class="when">2026-12-24 11:45</span> <small>at the latest</small>' in row, "the stored figures'"


def test_a_queue_without_stored_figures_is_worked_out_whole(organisation, online_slots, operator):
    job = make_job(organisation, State.QUEUED, gpus=1, hours=1)
    row = _job_row(client_for(operator).get(OVERVIEW).content.decode(), job)
    assert "at the latest" in row, "four slots free: it starts now at the latest"


def test_it_shows_each_organisation_against_its_quotas(organisation, other_organisation, online_slots, operator):
    Organisation.objects.filter(pk=organisation.pk).update(max_slots_held=2, monthly_spend_cap=Decimal("6"))
    Organisation.objects.filter(pk=other_organisation.pk).update(max_slots_held=1, share_weight=Decimal("2.5"))
    _running(organisation, online_slots[:2], gpus=2)
    _running(other_organisation, online_slots[2:], gpus=2)
    make_job(other_organisation, State.QUEUED)
    billed = make_job(organisation, State.SUCCEEDED)
    now = timezone.now()
    entry(billed, ended=now)
    entry(billed, ended=now, kind=LedgerEntry.Kind.CORRECTION, amount="2.4")
    entry(billed, ended=now.replace(day=1, hour=0, minute=0, second=0, microsecond=0) - timedelta(seconds=1),
          kind=LedgerEntry.Kind.CORRECTION, amount="100")  # last month's: not this month's  # fmt: skip
    Organisation.objects.create(name="Idle Lab", slug="idle-lab")

    page = client_for(operator).get(OVERVIEW).content.decode()
    assert "Idle Lab" not in page, "nothing held, waiting, charged or set"
    assert page.index("Other Lab</a>") < page.index("Partner Lab</a>"), "those over a quota first"

    over = _row(page, f"/admin/portal/organisation/{other_organisation.pk}/change/")
    assert over.startswith('<tr class="over">') and '<span class="state failed">Over quota</span>' in over
    assert '<span class="bad"><strong>2</strong> of 1</span> <small class="bad">over its cap</small>' in over
    assert '<span class="amount">0.00 USD</span> <small>no cap</small>' in over
    assert '<td data-label="Share" class="num">2.50</td>' in over
    assert "1 running<small>1 queued</small>" in over

    full = _row(page, f"/admin/portal/organisation/{organisation.pk}/change/")
    assert full.startswith("<tr>"), "at its caps, not over them"
    assert '<span class="warn"><strong>2</strong> of 2</span> <small>at its cap</small>' in full
    assert '<span class="amount warn">6.00 USD</span> <small>of <span class="amount">6.00 USD</span>: reached' in full
    assert f"Charged in {now:%B}</th>" in page, "3.60 held and 2.40 corrected this month; last month's 100 not"


def test_an_organisation_over_its_monthly_spending_cap_is_shown_so(organisation, operator):
    Organisation.objects.filter(pk=organisation.pk).update(monthly_spend_cap=Decimal("5"))
    entry(make_job(organisation, State.SUCCEEDED), ended=timezone.now(), amount="7.2")
    page = client_for(operator).get(OVERVIEW).content.decode()
    row = _row(page, f"/admin/portal/organisation/{organisation.pk}/change/")
    assert row.startswith('<tr class="over">') and "Over quota" in row
    assert (
        '<span class="amount bad">7.20 USD</span> <small class="bad">of <span class="amount">5.00 USD</span>: over'
        in row
    )


def test_an_organisation_whose_open_jobs_budgets_reach_its_cap_is_shown_so(organisation, operator, rate_card):
    """As the job form counts it: the month's charges and the budgets of the jobs not ended, at the rate in force."""
    Organisation.objects.filter(pk=organisation.pk).update(monthly_spend_cap=Decimal("10"))
    entry(make_job(organisation, State.SUCCEEDED), ended=timezone.now())
    make_job(organisation, State.QUEUED, gpus=2, hours=1)
    page = client_for(operator).get(OVERVIEW).content.decode()
    row = _row(page, f"/admin/portal/organisation/{organisation.pk}/change/")
    assert row.startswith("<tr>"), "not over: nothing it was charged is past its cap"
    assert '<span class="amount warn">3.60 USD</span> <small>of <span class="amount">10.00 USD</span>: reached' in row
    assert """with its open jobs' budgets <span class="amount">10.80 USD</span>""" in row, "3.60 + 2 × 1 h × 3.60"


def test_it_shows_each_node_with_its_slots_online_held_and_used(organisation, online_slots, operator):
    seen = timezone.now() + timedelta(days=1)
    node = Node.objects.create(name="gpu-box", hostname="gpu-box", last_seen=seen)
    gpus = [
        Gpu.objects.create(node=node, index=i, kind=Gpu.Kind.GPU, name="H100", queue=f"slot.gpu-box.{i}",
                           last_seen=seen if i < 2 else None, utilisation=busy)
        for i, busy in enumerate([50, 70, 99])
    ]  # fmt: skip
    _running(organisation, gpus[:1] + online_slots[:1], gpus=2)
    gone = Node.objects.create(name="gone-box", hostname="gone-box", last_seen=timezone.now() - timedelta(days=2))
    Gpu.objects.create(node=gone, index=0, kind=Gpu.Kind.GPU, name="H100", queue="slot.gone.0", last_seen=None)

    page = client_for(operator).get(OVERVIEW).content.decode()
    row = _row(page, f"/admin/jobs/node/{node.pk}/change/")
    assert '<td data-label="Online" class="num">2 of 3</td>' in row, "two of its three slots heard from lately"
    assert '<td data-label="Held" class="num">1</td>' in row
    assert '<td data-label="Used" class="num">1.2</td>' in row, "its online slots' 50 % and 70 %"
    row = _row(page, f"/admin/jobs/node/{online_slots[0].node_id}/change/")
    assert "4 of 4" in row and '<td data-label="Used" class="num">–</td>' in row, "CPU slots report no utilisation"
    row = _row(page, f"/admin/jobs/node/{gone.pk}/change/")
    assert '<span class="state failed">Offline</span>' in row and "0 of 1" in row


def test_it_is_for_operators_only_and_the_console_leads_to_it(client, django_user_model, partner_client):
    assert client.get(OVERVIEW).url.startswith("/admin/login/"), "to the console's login"
    viewer = assert_for_operators_who_may_view_jobs(OVERVIEW, partner_client, django_user_model)
    assert f'href="{OVERVIEW}"' in viewer.get("/admin/").content.decode()
    assert f'href="{OVERVIEW}"' in viewer.get("/admin/jobs/job/").content.decode()
    assert f'href="{OVERVIEW}"' in viewer.get(OVERVIEW).content.decode(), "in the staff's nav"
    assert OVERVIEW not in partner_client.get("/jobs/").content.decode()


def test_it_refreshes_itself_as_a_fragment(organisation, operator, online_slots):
    client = client_for(operator)
    fragment = client.get(OVERVIEW, HTTP_HX_REQUEST="true").content.decode()
    assert fragment.strip().startswith('<div id="live" class="overview" hx-get="/admin/jobs/job/overview/"')
    assert "<html" not in fragment and "Nobody waits." in fragment and "fake-node" in fragment
    make_job(organisation, State.QUEUED, gpus=3)
    fragment = client.get(OVERVIEW, HTTP_HX_REQUEST="true").content.decode()
    assert 'Fixed, <span class="when">3 × 1 h</span>' in fragment


def test_its_queries_do_not_grow_with_the_queue(organisation, online_slots, operator, django_assert_max_num_queries):
    client = client_for(operator)

    def fill(jobs: int) -> None:
        """As many organisations, each with a job queued and one running."""
        for _ in range(jobs):
            n = Organisation.objects.count()
            lab = Organisation.objects.create(name=f"Lab {n}", slug=f"lab-{n}")
            make_job(lab, State.QUEUED, queued_at=timezone.now() - timedelta(minutes=n))
            make_job(lab, State.RUNNING, started_at=timezone.now() - timedelta(minutes=n), records_total=10)

    fill(5)
    # The session and user, the fleet (5), the counts, the running jobs and their holds, the queue and its figures
    # worked out whole (5), the organisations' holds, jobs, charges and rows, the rate card, the nodes (3).
    with django_assert_max_num_queries(24) as few:
        client.get(OVERVIEW, HTTP_HX_REQUEST="true")
    fill(60)
    with django_assert_max_num_queries(len(few)):
        client.get(OVERVIEW, HTTP_HX_REQUEST="true")
