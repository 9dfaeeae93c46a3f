"""The request (GPUs × hours in a shape) and the scheduler that gives slots to jobs.

A pass (`schedule`) gives free slots in two rounds: first the jobs with a deadline they could meet when
submitted, earliest deadline first, each the width that keeps it on time; then every job by its place in
the fair share (`_Fair`: least work left, weighed by each organisation's recent GPU-hours over its
weight), up to the width it can use; what the order and the widths are is the policy's (`policy.py`). A
fixed request starts only when all its GPUs are free at once; a flexible one starts on the slots free now
and grows into more, and gives slots back at shard boundaries to a job ahead of it. The first job that
cannot get what it needs is protected: flexible jobs after it are asked for their slots back, or, when they
do not hold enough, it gets an EASY reservation (the earliest time enough of the slots it can run on free
up, if the running jobs run to their time limits) that a fixed job behind it may not delay. A job that asks
for more GPUs than are online at all (a node left) waits without holding up the rest.
"""

import heapq
import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from itertools import chain, islice
from typing import NamedTuple

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import (
    Case,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Q,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from jobs import lifecycle, processors
from jobs import queue_figures as stored_figures
from jobs.models import Allocation, Gpu, Job, Node, Shard, State, UsageHour
from jobs.queue_figures import QueueFigures
from jobs.scheduling import policy
from portal.models import Organisation
from portal.text import ascii_count, ascii_decimal, shown

log = logging.getLogger(__name__)


class RequestError(ValueError):
    """What is wrong with a request: each (field, sentence) found; `field` and the message are the first's."""

    def __init__(self, field: str, message: str, *more: tuple[str, str]):
        super().__init__(message)
        self.field = field
        self.refusals = ((field, message), *more)


@dataclass(frozen=True)
class Fleet:
    online: int
    free: int
    cpu_only: bool
    work_kinds: frozenset[str] = frozenset()  # the kinds some online node can run

    @property
    def noun(self) -> str:
        return "CPU slot" if self.cpu_only else "GPU"

    def count(self, n: int) -> str:
        return f"{n} {self.noun}{'' if n == 1 else 's'}"


def schedulable_slots():
    """The slots jobs run on: the GPUs when any is online (a machine that fell back to CPU slots, its
    NVML failing, must not take jobs that pay for GPUs); CPU slots only on a fleet without GPUs."""
    slots = Gpu.objects.all()
    if Gpu.objects.online().filter(kind=Gpu.Kind.GPU).exists():
        slots = slots.filter(kind=Gpu.Kind.GPU)
    return slots


def node_runs(work_kinds: list[str], work: str) -> bool:
    """Whether a node that reported these work kinds can run `work`. A node that reported none (a
    gpuworker from before nodes reported them) runs the kinds that need only requirements.txt."""
    if work_kinds:
        return work in work_kinds
    return any(processor.name == work and not processor.requires for processor in processors.available())


def nodes_running(work: str) -> list[int]:
    """The nodes whose slots can run a work kind (there are few nodes: they are read whole)."""
    return [pk for pk, kinds in Node.objects.values_list("pk", "work_kinds") if node_runs(kinds, work)]


def fleet() -> Fleet:
    online = schedulable_slots().online()
    kinds = set(online.values_list("kind", flat=True))
    reported = Node.objects.filter(pk__in=online.values("node_id")).values_list("work_kinds", flat=True)
    work_kinds = {p.name for p in processors.available() if any(node_runs(found, p.name) for found in reported)}
    return Fleet(
        online=online.count(),
        free=online.free().count(),
        cpu_only=kinds == {Gpu.Kind.CPU},
        work_kinds=frozenset(work_kinds),
    )


# What a job's time limit is worked out from (Job.time_limit_at).
_LIMIT_FIELDS = ("started_at", "hours", "held_before", "deadline", "request", "budget_ends_at")


def slot_noun() -> str:
    """fleet().noun in one query: "CPU slot" when every slot online is one, "GPU" else."""
    kinds = set(Gpu.objects.online().order_by().values_list("kind", flat=True).distinct())
    return "CPU slot" if kinds == {Gpu.Kind.CPU} else "GPU"


def parse_request(gpus, hours, shape: str = Job.Shape.SHORT_WIDE, work: str = "") -> tuple[int, Decimal]:
    """GPUs and hours laid out in the chosen shape, checked against the fleet (its slots that can run
    `work`, when it is given); RequestError names the field of each value refused (the GPUs, the hours and
    the shape are read each on its own, so that all three are said at once)."""
    refusals = []
    gpus = _read(_gpus, gpus, refusals)
    hours = _read(_hours, hours, refusals)
    if shape not in Job.Shape.values:
        refusals.append(("shape", f"The shape must be short-wide or long-narrow, not {shown(shape)}."))
    if refusals:
        raise RequestError(*refusals[0], *refusals[1:])
    if shape == Job.Shape.LONG_NARROW:
        gpus, hours = 1, gpus * hours
    if hours > settings.E31_MAX_HOURS:
        raise RequestError("hours", f"A job can run at most {settings.E31_MAX_HOURS} hours; this asks for {hours}.")
    check_fleet(gpus, work)
    return gpus, hours


def parse_width(kind: str, max_gpus, deadline: bool, work: str = "") -> tuple[str, int | None]:
    """The kind of request (blank: flexible, or fixed for a job with a `deadline`) and a flexible job's width
    cap (None: its GPUs), checked against the fleet online that can run `work`; RequestError names the field
    refused. A cap may be below the GPUs asked for: the job then runs narrower, for longer."""
    kind = str(kind or "").strip().lower() or (Job.Request.FIXED if deadline else Job.Request.FLEXIBLE)
    if kind not in Job.Request.values:
        raise RequestError("request", f"A request is fixed or flexible, not {shown(kind)}.")
    if max_gpus is None or not str(max_gpus).strip():
        return kind, None
    cap = ascii_count(str(max_gpus).strip(), signed=True)
    if kind == Job.Request.FIXED:
        raise RequestError("max_gpus", "A width cap is for a flexible request; a fixed one runs on exactly its GPUs.")
    if cap is None:
        raise RequestError("max_gpus", f"The width cap must be a whole number of GPUs, not {shown(max_gpus)}.")
    if cap < 1:
        raise RequestError("max_gpus", f"The width cap must be at least 1, not {cap}.")
    online = schedulable_slots().online()
    if work:
        online = online.filter(node__in=nodes_running(work))
    if cap > (count := online.count()):
        where = f" that can run {work}" if work else ""
        raise RequestError("max_gpus", f"The fleet has {count} online{where}; cap the width at {count} or fewer.")
    return kind, cap


def check_fleet(gpus: int, work: str = "") -> None:
    """That the fleet online (its slots that can run `work`, when it is given) can hold `gpus` at once; RequestError
    says why not, in the words a job's request is refused in (a sample's estimate for a pass says the same)."""
    current = fleet()
    if current.online == 0:
        raise RequestError("gpus", "No GPUs are online right now; try again when the fleet is back.")
    online = current.online
    if work:
        online = schedulable_slots().online().filter(node__in=nodes_running(work)).count()
        if online == 0:
            why = " now"
            if processors.get(work).requires:
                why = ": its libraries are not installed on the fleet (requirements-gpu.txt)"
            kinds = ", ".join(sorted(current.work_kinds))
            raise RequestError("work", f"No online node can run {work}{why}. The fleet can run {kinds}.")
    if gpus > online:
        where = "" if online == current.online else f" that can run {work}"
        raise RequestError("gpus", f"The fleet has {current.count(online)} online{where}; ask for {online} or fewer.")


def _read(read, given, refusals: list):
    """What `read` makes of `given`, or None with its refusal added to `refusals`."""
    try:
        return read(given)
    except RequestError as error:
        refusals.extend(error.refusals)
        return None


def _gpus(given) -> int:
    gpus = ascii_count(str(given).strip(), signed=True)
    if gpus is None:
        raise RequestError("gpus", f"GPUs must be a whole number, not {shown(given)}.")
    if gpus < 1:
        raise RequestError("gpus", f"Ask for at least one GPU, not {gpus}.")
    return gpus


def _hours(given) -> Decimal:
    hours = ascii_decimal(str(given).strip(), signed=True)
    if hours is None:
        raise RequestError("hours", f"Hours must be a number, not {shown(given)}.")
    if hours <= 0:
        raise RequestError("hours", f"Hours must be more than zero, not {hours}.")
    if hours > settings.E31_MAX_HOURS:  # before the decimals are counted: quantize raises past 28 digits
        raise RequestError("hours", f"A job can run at most {settings.E31_MAX_HOURS} hours; this asks for {hours}.")
    if hours != hours.quantize(Decimal("0.01")):
        raise RequestError("hours", f"Hours can have at most two decimals, not {hours}.")
    return hours


def waiting():
    """The queued jobs the scheduler may start, in queue order: not those the operators put on hold, nor
    those whose data is still staging until its pace lets them start (pacing)."""
    jobs = Job.objects.filter(state=State.QUEUED, on_hold_since=None).exclude(streaming=True, stream_ready=False)
    return jobs.order_by("queued_at", "pk")


def queue():
    """Every queued job in queue order, those on hold in their places."""
    return Job.objects.filter(state=State.QUEUED).order_by("queued_at", "pk")


def _ahead_of(job: Job):
    return queue().filter(Q(queued_at__lt=job.queued_at) | Q(queued_at=job.queued_at, pk__lt=job.pk))


def queue_position(job: Job) -> int | None:
    """Its place in the queue, counting the jobs on hold before it: they keep theirs. Read by counting
    the jobs before it, like on_hold_ahead and latest_start: these three are the reference of the
    figures stored for the whole queue at once (queue_figures), and what a job without stored
    figures is shown."""
    if job.state != State.QUEUED:
        return None
    return _ahead_of(job).count() + 1


def on_hold_ahead(job: Job) -> int:
    """How many of the jobs before it in the queue the operators put on hold."""
    return _ahead_of(job).exclude(on_hold_since=None).count() if job.state == State.QUEUED else 0


def latest_start(job: Job, now=None):
    """When a queued job starts at the latest, if no node leaves (see latest_starts). None when it is
    not queued, is on hold, or asks for more GPUs than are online."""
    if job.state != State.QUEUED or job.on_hold:
        return None
    return latest_starts(now, until=job).get(job.pk)


def figures_of(job: Job, now=None) -> QueueFigures:
    """A queued job's figures, worked out for it alone by reading every job before it."""
    return QueueFigures(queue_position(job), on_hold_ahead(job), latest_start(job, now))


def _fleet_releases(now) -> tuple[int, int, list[tuple]]:
    """The schedulable slots online, those free, and when the running jobs release the others at the
    latest: (when, how many GPUs), at each running job's time limit."""
    slots = schedulable_slots().online()
    online, free = slots.count(), slots.free().count()
    releases = [(max(now, job.time_limit_at()), held) for job, held in _holding(Q(gpu__in=slots))]
    return online, free, releases


def _holding(slots: Q) -> list[tuple[Job, int]]:
    """The running jobs that hold slots (those `slots`, a filter of Allocation), each with how many (the job
    with its time limit's fields). One query, from the open holds (an index of their own), not from every hold
    the running jobs had: a flexible job's given back."""
    rows = Allocation.objects.filter(slots, held_to__isnull=True, job__state=State.RUNNING).order_by()
    rows = rows.values_list("job_id", *(f"job__{name}" for name in _LIMIT_FIELDS)).annotate(Count("pk"))
    return [(Job(pk=pk, **dict(zip(_LIMIT_FIELDS, limit, strict=True))), held) for pk, *limit, held in rows]


def latest_starts(now=None, until: Job | None = None) -> dict:
    """Each queued job's latest start, in one pass over the queue (up to `until`): the jobs running now
    release their GPUs at their time limits at the latest, and each job in the queue starts as soon as
    enough are free and holds them for all its hours (those left, for one held before). A job on hold
    is counted in its place, as if its hold were lifted in time: the bound then holds whenever it is.
    Passes usually end before their limits, so jobs tend to start sooner. A job that asks for more
    GPUs than are online has none (None), nor has one on hold."""
    now = now or timezone.now()
    online, free, releases = _fleet_releases(now)
    starts = {}
    at = now
    queued = queue() if until is None else [*_ahead_of(until), until]
    for waiting in queued:
        starts[waiting.pk] = None
        if waiting.gpus > online:
            continue  # more than the fleet can give it: it waits without holding up the rest
        releases.sort()
        while free < waiting.gpus:
            if not releases:
                return starts  # slots held by no running job: the fleet changed while this looked
            when, count = releases.pop(0)
            at, free = max(at, when), free + count
        if waiting.deadline_passed(at):
            continue  # it would end unheld at its deadline, holding nothing up
        free -= waiting.gpus
        ends = at + timedelta(hours=float(waiting.hours)) - waiting.held_before
        releases.append((min(ends, waiting.deadline) if waiting.deadline else ends, waiting.gpus))
        if not waiting.on_hold:
            starts[waiting.pk] = at
    return starts


def queue_figures(now=None) -> dict[int, QueueFigures]:
    """Every queued job's figures, by id, in one pass over the queue read in a few columns: the places
    as queue_position and on_hold_ahead count them, the latest starts as latest_starts finds them,
    the releases kept in a heap."""
    now = now or timezone.now()
    online, free, releases = _fleet_releases(now)
    heapq.heapify(releases)
    rows = (
        queue()
        .annotate(held=Q(on_hold_since__isnull=False))
        .values_list("pk", "gpus", "hours", "held_before", "deadline", "held")
    )
    figures, at, on_hold, stuck = {}, now, 0, False
    for place, (pk, gpus, hours, held_before, deadline, is_on_hold) in enumerate(rows, start=1):
        start = None
        if not stuck and gpus <= online:
            while free < gpus and releases:
                when, count = heapq.heappop(releases)
                at, free = max(at, when), free + count
            stuck = free < gpus  # slots held by no running job: no later job has a latest start either
            if not stuck and not (deadline and at >= deadline):
                free -= gpus
                ends = at + timedelta(hours=float(hours)) - held_before
                heapq.heappush(releases, (min(ends, deadline) if deadline else ends, gpus))
                start = None if is_on_hold else at
        figures[pk] = QueueFigures(place, on_hold, start)
        on_hold += is_on_hold
    return figures


def refresh_queue_figures(now=None) -> bool:
    """Work out the queue's figures and store them, when the queue changed or they are old; True when
    they were."""
    now = now or timezone.now()
    try:
        if not stored_figures.due(now):
            return False
        stored_figures.write(queue_figures(now), at=now)
    except redis.RedisError as error:
        log.warning("the queue's figures are not stored, Redis is unreachable: %s", error)
        return False
    return True


class _Slot(NamedTuple):
    """A free slot as a pass reads it: what it takes to hold it and send it a task."""

    pk: int
    node_id: int
    queue: str


class _Slots:
    """The schedulable slots of one pass: for each work kind, once, the nodes that run it and how many
    online slots they have; the free slots, in the order they are taken. Read as plain rows: a fleet
    has a thousand."""

    def __init__(self):
        slots = schedulable_slots()
        free = slots.free().select_for_update(skip_locked=True, of=("self",)).order_by("node__name", "index")
        self.free = {row[0]: _Slot(*row) for row in free.values_list("pk", "node_id", "queue")}
        self.online = dict(slots.online().order_by().values_list("node_id").annotate(Count("pk")))
        self.kinds_of = dict(Node.objects.filter(pk__in=self.online).values_list("pk", "work_kinds"))
        self.for_work: dict[str, tuple[frozenset[int], int]] = {}

    def _able(self, work: str) -> tuple[frozenset[int], int]:
        """The nodes that can run `work`, and how many online slots they have."""
        if work not in self.for_work:
            nodes = frozenset(node for node, kinds in self.kinds_of.items() if node_runs(kinds, work))
            self.for_work[work] = nodes, sum(self.online.get(node, 0) for node in nodes)
        return self.for_work[work]

    def online_for(self, work: str) -> int:
        return self._able(work)[1]

    def nodes_for(self, work: str) -> frozenset[int]:
        return self._able(work)[0]

    def peek(self, work: str, gpus: int) -> list[_Slot]:
        """The first `gpus` free slots that can run `work`, not yet taken; none when fewer are free."""
        nodes = self._able(work)[0]
        fit = list(islice((slot for slot in self.free.values() if slot.node_id in nodes), gpus))
        return fit if len(fit) == gpus else []

    def peek_up_to(self, work: str, most: int) -> list[_Slot]:
        """Up to `most` free slots that can run `work`, not yet taken: as many as there are."""
        nodes = self._able(work)[0]
        return list(islice((slot for slot in self.free.values() if slot.node_id in nodes), most))

    def free_for(self, work: str) -> int:
        nodes = self._able(work)[0]
        return sum(1 for slot in self.free.values() if slot.node_id in nodes)

    def take(self, fit: list[_Slot]) -> None:
        for slot in fit:
            del self.free[slot.pk]


# How many jobs behind the first that must wait a pass considers for backfill: a pass's work stays bounded
# whatever the queue's length.
BACKFILL_WINDOW = 256


class _Reservation:
    """The first job that must wait, and what backfill may not take from it: by `shadow`, the time its
    slots are free if the jobs holding them run to their time limits, it needs `job.gpus` of the slots on
    `nodes`; `extra` of those free then are more than it needs, for a job that runs past `shadow`."""

    def __init__(self, job: Job, slots: "_Slots", plan: list[tuple[Job, list]], now):
        self.job = job
        self.nodes = slots.nodes_for(job.work)
        free = sum(1 for slot in slots.free.values() if slot.node_id in self.nodes)
        releases = sorted(self._held_until(plan, now))
        self.shadow = None
        while free < job.gpus and releases:
            self.shadow, count = releases.pop(0)
            free += count
        self.extra = free - job.gpus if self.shadow is not None else 0

    def _held_until(self, plan: list[tuple[Job, list]], now) -> list[tuple]:
        """When the slots on the reserved job's nodes held now come free at the latest: (when, how many), the
        running jobs' at their time limits and this pass's starts' at theirs."""
        held = [(max(now, job.time_limit_at()), count) for job, count in _holding(Q(gpu__node__in=self.nodes))]
        for job, taken in plan:
            count = sum(1 for slot in taken if slot.node_id in self.nodes)
            if count:
                held.append((_ends(job, now), count))
        return held

    def allows(self, job: Job, taken: list, now) -> bool:
        """Whether `job`, on the slots `taken`, leaves the reservation as it was: it ends by `shadow`, or it
        takes no more of the reserved job's slots than `extra` (which it then uses up)."""
        if self.shadow is None:
            return False  # no running job frees what the reserved job needs: nothing can be promised
        if _ends(job, now) <= self.shadow:
            return True
        needed = sum(1 for slot in taken if slot.node_id in self.nodes)
        if needed > self.extra:
            return False
        self.extra -= needed
        return True


def _ends(job: Job, now):
    """When a job started now ends at the latest: its hours left, or its deadline."""
    ends = now + timedelta(hours=float(job.hours)) - job.held_before
    return min(ends, job.deadline) if job.deadline else ends


class _Queued(NamedTuple):
    """What the order is worked out from, read as a plain row: a pass reads the queue's head in these."""

    pk: int
    organisation_id: int
    gpus: int
    hours: Decimal
    held_before: timedelta
    work: str
    deadline: object  # a datetime, or None
    deadline_feasible: bool | None
    arrival: float
    request: str
    max_gpus: int | None

    @property
    def flexible(self) -> bool:
        return self.request == Job.Request.FLEXIBLE

    @property
    def width_cap(self) -> int:  # as Job.width_cap
        return (self.max_gpus or self.gpus) if self.flexible else self.gpus

    @property
    def left(self) -> float:
        """GPU-seconds of its budget (as Job.budget_gpu_seconds) not yet held."""
        return int(self.gpus * self.hours * 3600) - self.held_before.total_seconds() * self.gpus


_QUEUED = ("pk", "organisation_id", "gpus", "hours", "held_before", "work", "deadline", "deadline_feasible")


def _queued(job: Job) -> _Queued:
    """A job's row, as _Claims reads the queue's."""
    return _Queued(*(getattr(job, name) for name in _QUEUED), _arrival(job), job.request, job.max_gpus)


class _Seconds(Func):
    """A duration in seconds: PostgreSQL's interval, SQLite's microseconds."""

    output_field = FloatField()

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="(%(expressions)s / 1000000.0)", **extra)


class _Took(Func):
    """The seconds from one timestamp to another (`started_at` to `finished_at`), in the database's own functions:
    Django's subtraction of datetimes on SQLite calls back into Python for each row, and a pass reads the
    shards of every running flexible job."""

    output_field = FloatField()
    arity = 2

    def as_postgresql(self, compiler, connection, **extra):
        template = "EXTRACT(EPOCH FROM %(expressions)s)"
        return self.as_sql(compiler, connection, template=template, arg_joiner=" - ", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        template = "((julianday(%(expressions)s)) * 86400.0)"
        return self.as_sql(compiler, connection, template=template, arg_joiner=") - julianday(", **extra)


# A queued job's work left in SQL, as _Queued.left works it out; and its arrival, as _arrival.
_LEFT = ExpressionWrapper(
    Cast(F("gpus") * F("hours"), FloatField()) * 3600 - _Seconds("held_before") * F("gpus"), output_field=FloatField()
)
_ARRIVED = Coalesce("queued_at", "started_at", "created")
_COLUMNS = (*_QUEUED, "arrived", "request", "max_gpus")


def _rows(queryset, *more: str):
    """Its rows, each as a _Queued followed by the values of `more`, read a few at a time: a pass looks at
    the head of the queue."""
    for values in queryset.values_list(*_COLUMNS, *more).iterator(chunk_size=64):
        *fields, arrived, request, max_gpus = values[: len(_COLUMNS)]
        yield _Queued(*fields, arrived.timestamp(), request, max_gpus), *values[len(_COLUMNS) :]


@dataclass
class _Claim:
    """A job a pass may give slots to: a queued one, or a running flexible one narrower than its cap with
    shards nobody has taken. `need` is the fewest slots it starts (or keeps on time) with; `want`, the most
    it would use; `key`, its place in the order (see policy.order). `job` is read when a pass comes to it (_with_jobs):
    a pass looks at the head of the queue."""

    row: _Queued
    held: int
    need: int
    want: int
    key: tuple
    fair: tuple | None  # its place among all jobs, deadlines or not (see _Fair); None in the deadlines' round
    job: Job | None = None
    shard_seconds: float = 0.0  # a running flexible job's: a shard's seconds (_work_left), the longest to a boundary

    @property
    def due(self) -> bool:
        """Whether it is a deadline job the scheduler keeps on time."""
        return self.key[0] == 0


def _with_jobs(claims, chunk: int = 64):
    """The claims in their order, each with its job read: `chunk` at a time, as a pass walks them."""
    claims = iter(claims)
    while batch := list(islice(claims, chunk)):
        unread = [claim.row.pk for claim in batch if claim.job is None]
        jobs = Job.objects.only(*_FIELDS).in_bulk(unread) if unread else {}
        for claim in batch:
            claim.job = claim.job or jobs.get(claim.row.pk)
            if claim.job is not None:  # gone since the queue was read: passed by
                yield claim


def _usage(now) -> tuple[dict[int, float], dict[int, int]]:
    """Each organisation's recent GPU-hours held, every hour's weight halved each half-life
    (E31_FAIR_SHARE_HALF_LIFE_HOURS): the fair share's measure of what it had; and the slots it holds now."""
    half_life = settings.E31_FAIR_SHARE_HALF_LIFE_HOURS * 3600
    usage: dict[int, float] = {}
    holding: dict[int, int] = {}

    def add(org: int, seconds: float, ended) -> None:
        hours = max(0.0, seconds) / 3600
        usage[org] = usage.get(org, 0.0) + hours * 0.5 ** (max(0.0, (now - ended).total_seconds()) / half_life)

    for org, start in (
        Allocation.objects.filter(held_to=None).order_by().values_list("job__organisation_id", "held_from")
    ):
        holding[org] = holding.get(org, 0) + 1
        add(org, (now - start).total_seconds(), now)
    # The holds that ended, as rolled up where they ended: a row an organisation and an hour (UsageHour), each
    # hour's decayed from its middle; none older than ten half-lives, which weigh under a thousandth.
    since = now - timedelta(seconds=10 * half_life, hours=1)
    rolled_up = UsageHour.objects.filter(hour__gt=since).values_list("organisation_id", "hour", "seconds")
    for org, hour, seconds in rolled_up:
        add(org, seconds, hour + timedelta(minutes=30))
    return usage, holding


class _Fair:
    """The fair share of one pass (policy.fair_scales): each job's place is its GPU-hours left times its
    organisation's scale, its recent GPU-hours (_usage) over its weight plus a floor; smallest first. So
    least work left goes first between organisations that held alike, a partner that held little lately goes
    ahead of one that held much unless its job is that much longer, and one partner's flood of jobs queues
    behind another's few. The queue's places are worked out by the database (`queued`), so that a pass reads
    the head of the queue in the order, not all of it."""

    def __init__(self, standing: "_Standing", running: list[tuple[_Queued, float]]):
        self.weights = {org: float(weight or 1) for org, weight in standing.weights.items()}
        self.scales, self.floor = policy.fair_scales(standing.usage, self.weights)
        self.running = {row.pk: policy.place(self._tag(row, left), left, row) for row, left in running}

    def _tag(self, row: _Queued, left: float) -> float:
        org = row.organisation_id
        return policy.fair_tag(left, self.scales.get(org, self.floor / self.weights.get(org, 1.0)))

    def queued(self):
        """The waiting jobs, tagged (`tag`, `left`, `arrived`) and in the order of their tags."""
        orgs = set(self.scales) | {org for org, weight in self.weights.items() if weight != 1.0}
        scales = [
            When(organisation_id=org, then=Value(self.scales.get(org, self.floor / self.weights.get(org, 1.0))))
            for org in orgs
        ]
        tag = ExpressionWrapper(_LEFT / 3600.0 * Case(*scales, default=Value(self.floor)), output_field=FloatField())
        rows = waiting().annotate(left=_LEFT, arrived=_ARRIVED, tag=tag)
        return rows.order_by("tag", "left", "arrived", "id")

    def of(self, row: _Queued, left: float) -> tuple:
        """The place of one job (queued, or not yet)."""
        return policy.place(self._tag(row, left), left, row)


def _arrival(job: Job) -> float:
    return (job.queued_at or job.started_at or job.created).timestamp()


_FIELDS = ("pk", "organisation_id", "gpus", "hours", "held_before", "work", "deadline", "deadline_feasible",
           "started_at", "queued_at", "created", "request", "max_gpus", "budget_ends_at")  # fmt: skip


class _Standing(NamedTuple):
    """The organisations as a pass weighs them: recent usage, slots held now, weights and slot quotas."""

    usage: dict[int, float]
    holding: dict[int, int]
    weights: dict[int, Decimal]
    caps: dict[int, int]


def _standing(now) -> _Standing:
    usage, holding = _usage(now)
    weights, caps = {}, {}
    for pk, weight, cap in Organisation.objects.values_list("pk", "share_weight", "max_slots_held"):
        weights[pk] = weight
        if cap is not None:
            caps[pk] = cap
    return _Standing(usage, holding, weights, caps)


class _Claims:
    """The jobs a pass may give slots to, streamed in the order: the queue read from the database a few rows
    at a time, the running flexible jobs (few) read whole. `flexible`: every running flexible job's claim by
    id, whether it can grow or not (the order says which of them give slots back to whom)."""

    def __init__(self, now, standing: "_Standing"):
        self.now = now
        running = list(Job.objects.filter(state=State.RUNNING, request=Job.Request.FLEXIBLE).only(*_FIELDS))
        holds = _counts(Allocation.objects.filter(job__in=running, held_to=None))
        shards = _shards(running)
        rows = []
        for job in running:
            row, held_now = _queued(job), holds.get(job.pk, 0)
            left_shards, shard, left, measured = _work_left(job, shards.get(job.pk))
            need = max(0, policy.on_time_width(row, left, now, shard) - held_now) if left_shards else 0
            want = max(policy.useful_width(row, left_shards), min(row.gpus, row.width_cap, held_now + left_shards))
            if not measured:
                want = min(want, policy.unmeasured_width(row, need + held_now))
            elif job.budget_ends_at is not None:
                budget = max(0.0, (job.budget_ends_at - now).total_seconds()) * held_now
                want = min(want, max(need + held_now, policy.affordable_width(held_now, left, budget, shard)))
            rows.append((job, row, held_now, need, want - held_now, shard, left))
        self.share = _Fair(standing, [(row, left) for _, row, *_, left in rows])
        self.flexible = {}
        for job, row, held_now, need, want, shard, _ in rows:
            fair = self.share.running[job.pk]
            self.flexible[job.pk] = _Claim(row, held_now, need, want, policy.order(row, fair), fair, job, shard)
        self.growing = sorted((claim for claim in self.flexible.values() if claim.want > 0), key=lambda c: c.fair)

    def _claim(self, row: _Queued, fair: tuple | None) -> _Claim:
        left = row.left
        if not row.flexible:
            return _Claim(row, 0, row.gpus, row.gpus, policy.order(row, fair), fair)
        need = policy.on_time_width(row, left, self.now)
        return _Claim(row, 0, need, policy.unmeasured_width(row, need), policy.order(row, fair), fair)

    def due(self):
        """The deadline jobs, earliest deadline first."""
        rows = waiting().filter(deadline__isnull=False).exclude(deadline_feasible=False).annotate(arrived=_ARRIVED)
        queued = (self._claim(row, None) for (row,) in _rows(rows.order_by("deadline", "arrived", "id")))
        return heapq.merge(queued, (claim for claim in self.growing if claim.due), key=lambda claim: claim.key)

    def fair(self):
        """Every job, deadline or not, by its place in the fair share."""
        queued = (self._claim(row, policy.place(tag, row.left, row)) for row, tag in _rows(self.share.queued(), "tag"))
        return heapq.merge(queued, self.growing, key=lambda claim: claim.fair)

    def in_order(self):
        """Every claim by its place in the order (policy.order): deadline jobs by EDF, then the rest by fair share."""
        return chain(self.due(), (claim for claim in self.fair() if not claim.due))


def outlook(job: Job, now=None) -> tuple:
    """When a job (about to be queued, or queued) is expected to start and to end, by the queue now: on
    the slots online that can run its work, free now or as the jobs that keep theirs release them (at their
    time limits; the flexible jobs after it in the order give their slots back at their next shard boundaries,
    taken as half a shard from now, the last in the order first), after the queued jobs ahead of it in the order
    (each taken as holding its GPUs for its hours). A flexible job grows into slots as they free up, to its
    cap. Expected, not promised: passes usually end before their limits, so jobs tend to end sooner.
    (None, None) when no slot online can run it."""
    now = now or timezone.now()
    claims = _Claims(now, _standing(now))
    flexible = claims.flexible
    row = _queued(job)._replace(pk=job.pk or math.inf)  # one not saved yet is the last of its ties
    left = row.left
    key = policy.order(row, None if policy.is_due(row) else claims.share.of(row, left))
    nodes = set(nodes_running(job.work))
    slots = schedulable_slots().online().filter(node__in=nodes)
    online, free = slots.count(), slots.free().count()
    if online == 0:
        return None, None
    releases, behind = [], []
    for other, held in _holding(Q(gpu__in=slots) & ~Q(job=job.pk)):
        claim = flexible.get(other.pk)
        if claim is not None and claim.key > key:
            behind.append((claim.key, claim.shard_seconds, held))
        else:
            releases.append((max(now, other.time_limit_at()), held))
    # A pass asks the flexible jobs after it for their slots the last in the order first (_ask_back), each slot
    # back at its next shard boundary (half a shard from now, as expected of slots each somewhere in a shard),
    # and none sooner than those asked before it: not the soonest boundaries of all.
    until = now
    for _, shard, held in sorted(behind, key=lambda hold: hold[0], reverse=True):
        until = max(until, now + timedelta(seconds=shard / 2))
        releases.append((until, held))
    heapq.heapify(releases)
    at = now
    for claim in claims.in_order():
        if claim.key >= key:
            break
        if claim.held or claim.row.pk == job.pk or claim.row.work != job.work:
            continue
        gpus = min(claim.row.gpus, online)
        while free < gpus and releases:
            when, count = heapq.heappop(releases)
            at, free = max(at, when), free + count
        if free < gpus:
            break
        free -= gpus
        heapq.heappush(releases, (at + timedelta(hours=float(claim.row.hours)), gpus))
    need = 1 if job.flexible else min(job.gpus, online)
    while free < need and releases:
        when, count = heapq.heappop(releases)
        at, free = max(at, when), free + count
    start = at
    if not job.flexible:
        return start, start + timedelta(hours=float(job.hours)) - job.held_before
    work, cap = left, job.width_cap  # GPU-seconds, done at the width it has, growing as slots free up
    while True:
        width = min(cap, max(1, free))
        upcoming = releases[0][0] if releases and width < cap else None
        if upcoming is None or at + timedelta(seconds=work / width) <= upcoming:
            return start, at + timedelta(seconds=work / width)
        when, count = heapq.heappop(releases)
        work -= width * (when - at).total_seconds()
        at, free = max(at, when), free + count


class _Shards(NamedTuple):
    """A running job's shards as a pass weighs them: how many, how many pending with their records, and the
    records and seconds of those done (from their start and end)."""

    total: int
    pending: int
    pending_records: int
    done_records: int
    done_seconds: float
    done: int


def _shards(jobs: list[Job]) -> dict[int, _Shards]:
    """Each job's _Shards, by id, in one grouped query."""
    pending, done = Q(status=Shard.Status.PENDING), Q(status=Shard.Status.DONE, started_at__isnull=False)
    took = _Took("finished_at", "started_at")
    figures = {
        "total": Count("pk"),
        "pending": Count("pk", filter=pending),
        "pending_records": Coalesce(Sum("record_count", filter=pending), 0),
        "done_records": Coalesce(Sum("record_count", filter=done), 0),
        "done_seconds": Coalesce(Sum(took, filter=done), 0.0),
        "done": Count("pk", filter=done),
    }
    rows = Shard.objects.filter(job__in=jobs).order_by().values("job_id").annotate(**figures)
    return {row.pop("job_id"): _Shards(**row) for row in rows}


def _work_left(job: Job, shards: _Shards | None) -> tuple[int, float, float, bool]:
    """A running flexible job's shards left to take, the seconds a shard takes, the slot-seconds of work
    left, and whether these were measured: from the shards it did (their seconds a record) once it did any,
    else from its request (a shard's share of its budget), which may ask for up to twice the work."""
    shards = shards or _Shards(0, 0, 0, 0, 0.0, 0)
    if shards.done_records and shards.done_seconds > 0:
        per_record = shards.done_seconds / shards.done_records
        return shards.pending, shards.done_seconds / shards.done, shards.pending_records * per_record, True
    shard = job.budget_gpu_seconds / max(1, shards.total)
    return shards.pending, shard, shard * shards.pending, False


def _counts(rows) -> dict[int, int]:
    """How many of these rows (holds or shards) each job has, in one grouped query."""
    return dict(rows.order_by().values_list("job_id").annotate(Count("pk")))


def _ask_back(claim: _Claim, short: int, slots: _Slots, flexible: dict[int, _Claim], by: str) -> int:
    """Ask running flexible jobs after `claim` in the order `by` (`key`: deadlines first; `fair`: among the
    rest, where a deadline job is never asked) for `short` slots on nodes that can run its work, at their
    next shard boundaries (those asked already counted): the last in the order first. How many are asked
    back in all; none when that could not make up `short`."""
    place = getattr(claim, by)
    behind = [pk for pk, other in flexible.items() if getattr(other, by) > place and (by == "key" or not other.due)]
    holds = Allocation.objects.filter(job__in=behind, held_to=None, gpu__node__in=slots.nodes_for(claim.row.work))
    rows = list(holds.values_list("pk", "job_id", "give_back"))
    if len(rows) < short:
        return 0
    asked = sum(1 for *_, back in rows if back)
    rows.sort(key=lambda row: getattr(flexible[row[1]], by), reverse=True)
    more = [pk for pk, _, back in rows if not back][: max(0, short - asked)]
    Allocation.objects.filter(pk__in=more).update(give_back=True)
    return asked + len(more)


class _Pass:
    """One scheduling pass: the free slots, the claims on them, and what it gave whom."""

    def __init__(self, now):
        self.now = now
        self.slots = _Slots()
        standing = _standing(now)
        self.claims = _Claims(now, standing)
        self.flexible = self.claims.flexible
        self.holding, self.caps = standing.holding, standing.caps
        self.given: dict[int, tuple[_Claim, list]] = {}
        self.pending: dict[int, int] = {}
        self.missed: set[int] = set()
        self.blocked, self.reserved, self.behind = None, None, 0

    def place(self, claim: _Claim, want: int, need: int, by: str) -> bool:
        """Give the claim up to `want` free slots, none unless `need` of them (a flexible job that holds
        none needs one); the first that cannot have its `need` is protected (see schedule). False when the
        pass should stop: no slot is left, or it read BACKFILL_WINDOW claims past the protected one."""
        job, slots, now = claim.job, self.slots, self.now
        if job.pk in self.missed:
            return True
        if not claim.held and job.pk not in self.given and job.deadline_passed(now):
            lifecycle.miss_deadline(job)  # never held: starting it now could do nothing it was asked for
            self.missed.add(job.pk)
            return True
        if job.flexible:  # on time only wider than the fleet: as wide as it goes, not waiting for what is not there
            need = min(need, slots.online_for(job.work))
        if need > slots.online_for(job.work) or want < 1:
            return True  # more than the fleet can give it online now (a node left): it waits, blocking none
        org, cap = job.organisation_id, self.caps.get(job.organisation_id)
        room = want if cap is None else min(want, cap - self.holding.get(org, 0))
        if room < (1 if job.flexible else need):
            return True  # its organisation holds its quota: it waits, holding up no other's jobs
        if self.blocked is not None:
            self.behind += 1
            if self.behind > BACKFILL_WINDOW:
                return False
        if job.flexible and not claim.held:
            if job.pk not in self.pending:
                self.pending[job.pk] = Shard.objects.filter(job=job, status=Shard.Status.PENDING).count()
            given = len(self.given.get(job.pk, (None, []))[1])
            pending = self.pending[job.pk]
            room = max(0, min(room, min(pending, max(need, policy.useful_width(claim.row, pending))) - given))
        taken = slots.peek_up_to(job.work, room)
        enough = bool(taken) and (job.flexible or len(taken) >= need)  # a flexible job starts on what is free
        if self.blocked is None and len(taken) < need:
            self.blocked = claim
            short = need - len(taken)
            if _ask_back(claim, short, slots, self.flexible, by) >= short:
                slots.take(slots.peek_up_to(job.work, need) if not job.flexible else [])  # kept for it
                enough = enough and job.flexible
            elif not job.flexible:
                self.reserved = _Reservation(job, slots, self.plans()[0], now)
        elif enough and self.reserved is not None and not job.flexible and not self.reserved.allows(job, taken, now):
            return True
        if not enough:
            return bool(slots.free)
        slots.take(taken)
        self.holding[org] = self.holding.get(org, 0) + len(taken)
        self.given[job.pk] = (claim, self.given.get(job.pk, (claim, []))[1] + taken)
        return True

    def plans(self) -> tuple[list[tuple[Job, list]], list[tuple[Job, list]]]:
        """The jobs to start on their slots, and the running ones to widen onto theirs."""
        start = [(claim.job, taken) for claim, taken in self.given.values() if not claim.held]
        grow = [(claim.job, taken) for claim, taken in self.given.values() if claim.held]
        return start, grow


def schedule() -> list[int]:
    """Give free slots to the jobs that wait for them, in two rounds: the deadline jobs by EDF, each the
    width that keeps it on time; then every job by its place in the fair share (see _Fair), up to
    the width it can use. A fixed request starts
    when all its GPUs are free at once; a flexible one starts on as many as are free (up to its cap), and
    a running flexible job grows into free slots it can use. The first job that cannot get what it needs
    is protected: when running flexible jobs after it in the order hold enough of the slots it can run
    on, they are asked for them back at their next shard boundaries and the free ones are kept for it;
    otherwise it gets an EASY reservation (see the module's docstring) that fixed jobs behind it must not
    delay (flexible ones give slots back when it matters). An organisation never holds more slots than its
    quota. A job on hold is passed by. The jobs started, in one UPDATE and one insert of their holds."""
    now = timezone.now()
    with transaction.atomic():
        one = _Pass(now)
        for claim in _with_jobs(one.claims.due()):
            if not one.place(claim, claim.need, claim.need, by="key"):
                break  # deadlines first, each given the width that keeps it on time
        else:
            for claim in _with_jobs(one.claims.fair()):
                given = len(one.given.get(claim.row.pk, (None, []))[1])
                if claim.due and not claim.row.flexible:
                    continue  # a fixed deadline job had its turn: all its GPUs, or none
                need = claim.need if not claim.row.flexible else int(not claim.held and not given)
                if not one.place(claim, claim.want - given, need, by="fair"):
                    break
        plan, grow = one.plans()
        started = list(lifecycle.start_holds(plan, send=True))
        widened = lifecycle.widen(grow)
    if started or widened:
        log.info("started the hold of jobs %s, widened jobs %s", started, list(widened))
    return started
