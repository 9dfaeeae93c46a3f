"""The operators' overview of the fleet and the queue, in the partners' look and readable on a phone: the jobs
running, with their width and progress; the queue in order, with when each job is expected to start; the
organisations against their quotas; the nodes, with their slots online, held and used. Each part is read in a
query or two over a page of rows at most, whatever the queue's length. It only reads: the scheduler keeps the
figures it shows (expected starts, widths, quotas)."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Q, Sum
from django.utils import timezone

from billing.models import LedgerEntry, RateCard
from jobs import queue_figures, scheduling
from jobs.billing_port import billing
from jobs.facts import JobFacts, Progress
from jobs.models import ACTIVE, Allocation, Gpu, Job, Node, State
from portal.listing import Month, month_of
from portal.models import Organisation

ROWS = 50  # the running jobs, queued jobs and organisations shown at a time; every node is shown


def held_now(by: str) -> dict[int, int]:
    """How many slots are held now, per `by` (a job, a GPU's node, a job's organisation): open holds only."""
    held = Allocation.objects.filter(held_to__isnull=True).order_by().values_list(by).annotate(Count("pk"))
    return dict(held)


@dataclass(frozen=True)
class Running:
    job: Job
    held: int
    facts: JobFacts  # its progress and expected finish, as its page shows them

    @property
    def progress(self) -> Progress:
        return self.facts.progress

    @property
    def lost(self) -> int:
        """The slots a fixed job holds fewer of than it asked for: lost with their node, until they rejoin."""
        fixed = not self.job.flexible and self.job.state == State.RUNNING
        return max(0, self.job.gpus - self.held) if fixed else 0


@dataclass(frozen=True)
class Queued:
    job: Job
    place: int
    start: datetime | None
    latest: bool  # `start` is the queue's latest start, not what the job was told when it was submitted


@dataclass(frozen=True)
class Quota:
    """An organisation's slots held now against its cap, and what the ledger charged it this month against its
    spending cap (in the rate card's currency; charges in another currency are listed apart), with what a new
    job's budget is checked against: the month's charges and its open jobs' budgets (`committed`, where it has
    a cap)."""

    organisation: Organisation
    held: int
    running: int
    queued: int
    charged: Decimal
    elsewhere: list[tuple[str, Decimal]]  # this month's charges in other currencies
    committed: Decimal | None

    @property
    def slots_over(self) -> bool:
        cap = self.organisation.max_slots_held
        return cap is not None and self.held > cap

    @property
    def slots_full(self) -> bool:
        return self.organisation.max_slots_held == self.held

    @property
    def spend_over(self) -> bool:
        cap = self.organisation.monthly_spend_cap
        return cap is not None and self.charged > cap

    @property
    def spend_full(self) -> bool:
        """Charged up to its cap, or its open jobs' budgets take it there: a new job would be refused."""
        cap = self.organisation.monthly_spend_cap
        return cap is not None and max(self.charged, self.committed or 0) >= cap

    @property
    def over(self) -> bool:
        return self.slots_over or self.spend_over


@dataclass(frozen=True)
class NodeSlots:
    node: Node
    slots: int
    online: int
    held: int
    used: float | None  # its online slots' utilisation added up, in slots; None where none reports it (CPU slots)


@dataclass(frozen=True)
class Overview:
    at: datetime
    counts: dict[str, int]  # the jobs in each active state, and "on_hold"
    running: list[Running]
    queued: list[Queued]
    month: Month
    currency: str
    quotas: list[Quota]
    quotas_count: int
    nodes: list[NodeSlots]

    @property
    def slots(self) -> dict[str, float | int | None]:
        """The whole fleet's slots: online, held and used (None where no slot reports its utilisation)."""
        reporting = [node.used for node in self.nodes if node.used is not None]
        online, held = sum(n.online for n in self.nodes), sum(n.held for n in self.nodes)
        return {"online": online, "held": held, "used": sum(reporting) if reporting else None}


def overview(now: datetime | None = None) -> Overview:
    now = now or timezone.now()
    month = month_of(f"{now:%Y-%m}")
    card = RateCard.in_force(now)
    currency = card.currency if card else RateCard._meta.get_field("currency").get_default()
    quotas, quotas_count = _quotas(month, currency)
    return Overview(
        at=now,
        counts=_counts(),
        running=_running(),
        queued=_queued(),
        month=month,
        currency=currency,
        quotas=quotas,
        quotas_count=quotas_count,
        nodes=_nodes(),
    )


def _counts() -> dict[str, int]:
    rows = (
        Job.objects.filter(state__in=ACTIVE)
        .order_by()
        .values_list("state")
        .annotate(n=Count("pk"), on_hold=Count("pk", filter=Q(on_hold_since__isnull=False, state=State.QUEUED)))
    )
    counts = {state: 0 for state in ACTIVE} | {"on_hold": 0}
    for state, count, on_hold in rows:
        counts[state] = count
        counts["on_hold"] += on_hold
    return counts


def _running() -> list[Running]:
    """The first jobs to have started of those holding slots or assembling their output, with their shards
    counted in the same query (a job finishing reads when its hold ended, for its speed: one more query)."""
    jobs = Job.objects.filter(state__in=(State.RUNNING, State.FINISHING)).select_related("organisation")
    jobs = list(JobFacts.counting_shards(jobs).order_by("started_at", "pk")[:ROWS])
    held = held_now("job")
    return [Running(job, held.get(job.pk, 0), JobFacts(job)) for job in jobs]


def _queued() -> list[Queued]:
    """The first jobs in the queue, each with its expected start as its page gives it (JobFacts.expected_start):
    the latest start of the queue's stored figures (worked out for the whole queue where some are not stored yet),
    else the start it was told when it was submitted."""
    jobs = list(scheduling.queue().select_related("organisation")[:ROWS])
    figures = queue_figures.read_many(jobs)
    if len(figures) < len(jobs):  # queued since the last scheduling pass, or Redis away
        figures = scheduling.queue_figures()
    rows = []
    for place, job in enumerate(jobs, start=1):
        latest = figures[job.pk].latest_start if job.pk in figures else None
        rows.append(Queued(job, place, latest or job.expected_start, latest is not None))
    return rows


def _quotas(month: Month, currency: str) -> tuple[list[Quota], int]:
    """The organisations that hold slots, have jobs running or queued, were charged this month, or have a quota
    or a share of their own: those over a quota first, then by the slots they hold."""
    held, jobs, charged = held_now("job__organisation"), _jobs_waiting_or_running(), _charged(month)
    configured = Q(max_slots_held__isnull=False) | Q(monthly_spend_cap__isnull=False) | ~Q(share_weight=1)
    quotas = []
    for organisation in Organisation.objects.filter(Q(pk__in={*held, *jobs, *charged}) | configured):
        amounts = charged.get(organisation.pk, {})
        elsewhere = sorted((other, amount) for other, amount in amounts.items() if other != currency)
        running, queued = jobs.get(organisation.pk, (0, 0))
        slots, charges = held.get(organisation.pk, 0), amounts.get(currency, Decimal(0))
        # As the job form counts it: a few queries for each organisation with a spending cap, which are few.
        committed = billing().month_committed(organisation) if organisation.monthly_spend_cap is not None else None
        quotas.append(Quota(organisation, slots, running, queued, charges, elsewhere, committed))
    quotas.sort(key=lambda quota: (not quota.over, -quota.held, quota.organisation.name))
    return quotas[:ROWS], len(quotas)


def _jobs_waiting_or_running() -> dict[int, tuple[int, int]]:
    """Each organisation's jobs running and queued."""
    rows = (
        Job.objects.filter(state__in=(State.RUNNING, State.QUEUED))
        .order_by()
        .values_list("organisation")
        .annotate(running=Count("pk", filter=Q(state=State.RUNNING)), queued=Count("pk", filter=Q(state=State.QUEUED)))
    )
    return {pk: (running, queued) for pk, running, queued in rows}


def _charged(month: Month) -> dict[int, dict[str, Decimal]]:
    """What the ledger charged each organisation in the month (its entries that ended then), per currency."""
    charged: dict[int, dict[str, Decimal]] = {}
    entries = LedgerEntry.objects.filter(held_to__gte=month.start, held_to__lt=month.end).order_by()
    for pk, currency, amount in entries.values_list("organisation", "currency").annotate(Sum("amount")):
        charged.setdefault(pk, {})[currency] = amount
    return charged


def _nodes() -> list[NodeSlots]:
    online = (
        Gpu.objects.online()
        .order_by()
        .values("node_id")
        .annotate(online=Count("pk"), used=Sum("utilisation"), reporting=Count("utilisation"))
    )
    online = {row["node_id"]: row for row in online}
    held = held_now("gpu__node")
    rows = []
    for node in Node.objects.annotate(slots=Count("gpus")).order_by("name"):
        found = online.get(node.pk, {"online": 0, "reporting": 0})
        used = found["used"] / 100 if found["reporting"] else None
        rows.append(NodeSlots(node, node.slots, found["online"], held.get(node.pk, 0), used))
    return rows
