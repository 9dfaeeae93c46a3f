"""The deadlines jobs were told at submit they could meet, checked again after the scheduling pass. A job told
"yes" whose expected finish has since moved past its deadline (a job with an earlier deadline arrived and goes
first, GPUs went offline, its shards run slower than its request allowed for) is told at once, and once:
`Job.deadline_at_risk_since` with why and the finish expected then, a line on its timeline, and
`signals.deadline_at_risk` (its webhook) once committed. A job short of GPUs (slots offline) is told once it has
been so for a minute, since a node that restarts comes back.

Only the jobs told "yes" and not told since are read, so the check costs a query while none waits or runs; the
running ones are read at once, the waiting ones a few a check, in turn (WAITING_PER_CHECK). A queued job's finish
is `outlook`'s, the answer it was given at submit worked out again now, so a job is not told "no" because two
estimates disagree. A running one's is the records left at its rate a slot so far, on every slot it may hold (a
flexible job running narrow may widen), once a shard is done (a model's loading is not its speed). Told once: a
job that comes back on time later keeps the note, and its page shows its expected finish beside it; a partner is
never told yes, no, yes.
"""

from collections import defaultdict
from datetime import datetime, timedelta
from functools import partial

from django.core.cache import cache
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jobs.facts import JobFacts
from jobs.models import Allocation, AtRisk, Job, JobEvent, State
from jobs.scheduling import outlook
from jobs.signals import deadline_at_risk

# A waiting job's outlook costs about 30 ms at 10k queued x 1k GPUs (docs/benchmarks.md): a check works out at
# most this many, going on from the last at the next, so with n waiting each is seen within n / 8 checks.
WAITING_PER_CHECK = 8
_AFTER = "promises:after"  # the deadline and id of the last waiting job checked
# A waiting job short of GPUs (slots gone offline) is told once it has been so this long, since a node that restarts
# comes back; one behind a job with an earlier deadline submitted after it is told at once.
SHORT_OF_GPUS_FOR = timedelta(seconds=60)
_SHORT_OF_GPUS = "promises:short:{}"  # when the job was first found short of GPUs, until it is on time again
_FORGET_SHORT = 86400  # seconds: a job told, or ended, leaves its mark behind a day at most


def promised(now: datetime):
    """The jobs waiting or running that were told their deadline can be met, and not told otherwise since."""
    told_yes = Job.objects.filter(deadline_feasible=True, deadline_at_risk_since=None, deadline__gt=now)
    return told_yes.filter(state__in=(State.QUEUED, State.RUNNING))


def check(now: datetime | None = None) -> list[int]:
    """Tell each job whose deadline can no longer be met, once; the ids of those told."""
    now = now or timezone.now()
    late = [*_late_waiting(now), *_late_running(now)]
    return [job.pk for job, finish, why in late if tell(job, finish, why, now)]


def _late_waiting(now: datetime):
    on_time = []
    for job in _next_waiting(now):
        _, finish = outlook(job, now)
        if finish is None or finish <= job.deadline:
            on_time.append(_SHORT_OF_GPUS.format(job.pk))
        elif (why := _why_waiting(job)) != AtRisk.FEWER_GPUS or _short_for_a_while(job, now):
            yield job, finish, why
    cache.delete_many(on_time)


def _short_for_a_while(job: Job, now: datetime) -> bool:
    """Whether the job was found short of GPUs SHORT_OF_GPUS_FOR ago or more: slots offline may be a node restarting."""
    since = cache.get_or_set(_SHORT_OF_GPUS.format(job.pk), now, timeout=_FORGET_SHORT)
    return now - since >= SHORT_OF_GPUS_FOR


def _next_waiting(now: datetime) -> list[Job]:
    """The next WAITING_PER_CHECK queued jobs told "yes", by deadline, from where the last check stopped and round
    to the first again."""
    waiting = promised(now).filter(state=State.QUEUED).order_by("deadline", "pk")
    after = cache.get(_AFTER)
    batch = []
    if after is not None:
        deadline, pk = after
        batch = list(waiting.filter(Q(deadline__gt=deadline) | Q(deadline=deadline, pk__gt=pk))[:WAITING_PER_CHECK])
    if len(batch) < WAITING_PER_CHECK:
        taken = {job.pk for job in batch}
        batch += [job for job in waiting[: WAITING_PER_CHECK - len(batch)] if job.pk not in taken]
    if batch:
        cache.set(_AFTER, (batch[-1].deadline, batch[-1].pk), timeout=None)
    return batch


def _why_waiting(job: Job) -> str:
    """A deadline job submitted after it with an earlier deadline goes first; else the fleet gave less."""
    ahead = Job.objects.filter(state__in=(State.QUEUED, State.RUNNING), deadline__lt=job.deadline)
    if ahead.filter(created__gt=job.created).exclude(deadline_feasible=False).exists():
        return AtRisk.EARLIER_DEADLINE
    return AtRisk.FEWER_GPUS


def _late_running(now: datetime):
    running = list(JobFacts.counting_shards(promised(now).filter(state=State.RUNNING)))
    served = _slot_seconds([job.pk for job in running], now)
    for job in running:
        progress = JobFacts(job).progress
        expected = progress.records_total if progress.records_total is not None else progress.records_expected
        if not job.shards_done or not expected or not served[job.pk]:
            continue
        # At its rate a slot so far, on every slot it may hold: a flexible job running narrow now may widen.
        per_second = progress.records_done / served[job.pk] * job.width_cap
        eta = max(0, expected - progress.records_done) / per_second
        if job.streaming and job.staging_eta is not None:
            eta = max(eta, job.staging_eta)  # its last shards can start only once their bytes arrive
        if now + timedelta(seconds=eta) > job.deadline:
            yield job, now + timedelta(seconds=eta), AtRisk.SLOWER


def _slot_seconds(job_ids: list[int], now: datetime) -> defaultdict[int, float]:
    """The slot-seconds each of these jobs has held, in all its holds."""
    served = defaultdict(float)
    holds = Allocation.objects.filter(job__in=job_ids).values_list("job_id", "held_from", "held_to")
    for job_id, held_from, held_to in holds:
        served[job_id] += ((held_to or now) - held_from).total_seconds()
    return served


def tell(job: Job, finish: datetime, why: str, now: datetime) -> bool:
    """Record that its deadline can no longer be met, and tell whoever listens once committed; False when it
    was told already (a second check racing this one)."""
    with transaction.atomic():
        untold = Job.objects.filter(pk=job.pk, deadline_at_risk_since=None, deadline_feasible=True)
        fields = {"deadline_at_risk_reason": why, "deadline_at_risk_finish": finish}
        if not untold.update(deadline_at_risk_since=now, modified=now, **fields):
            return False
        state = Job.objects.values_list("state", flat=True).get(pk=job.pk)  # locked by the update: as it is now
        message = f"its deadline can no longer be met: {AtRisk(why).label}; expected to finish {finish:%H:%M} UTC"
        JobEvent.objects.create(job_id=job.pk, state=state, at=now, message=message)
        transaction.on_commit(partial(deadline_at_risk.send_robust, Job, job_id=job.pk, at=now))
    return True
