"""The job lifecycle: one small function per transition, each a conditional UPDATE that wins once.

Job.state changes here and nowhere else (docs/architecture.md has the same table):

    submitted → staging          begin_staging   a staging attempt claims the job
    staging → queued             queue           its data is staged and cut into shards
    queued → running             start_holds     the scheduler holds their GPUs, for many jobs at once
    running → finishing          finish_pass     the last shard is done; the GPUs are released
    finishing → succeeded        succeed         its output is assembled
    running → queued, timed_out  lose_slots      every slot it held went offline
    running → queued             give_back       a flexible job gave its last slot back at a shard boundary
    running → timed_out          time_out        its hours, or its deadline, are up
    waiting → failed             miss_deadline   its deadline came before it could start
    not ended → failed           fail            staging, a shard or assembly failed for good
    not finishing → cancelled    cancel          its submitter or an operator stopped it

"Hold" is the GPUs a job holds, and what it is billed for: one Allocation per slot, each with its own
start and end. A flexible job's width changes between shards (widen adds holds, give_back ends one), and
its time limit is when its budget of GPU-seconds is spent at its width now (budget_ends_at, kept by
_rebudget whenever one of its holds starts or ends). An operator keeping a waiting job from
starting puts it on hold (put_on_hold, lift_hold): a flag on the job, not a state.
"""

import logging
import math
import uuid
from datetime import UTC, datetime, timedelta
from functools import partial

from django.db import IntegrityError, transaction
from django.db.models import Case, DurationField, F, Q, Subquery, Value, When
from django.db.models.functions import Greatest
from django.utils import timezone

from jobs import enqueue, queue_figures
from jobs.models import ENDED, Allocation, Gpu, Job, JobEvent, Shard, State, UsageHour, hold_periods
from jobs.signals import hold_released, state_changed

log = logging.getLogger(__name__)

TRANSITIONS: dict[str, tuple[str, ...]] = {
    State.SUBMITTED: (State.STAGING, State.FAILED, State.CANCELLED),
    State.STAGING: (State.QUEUED, State.FAILED, State.CANCELLED),
    State.QUEUED: (State.RUNNING, State.FAILED, State.CANCELLED),
    # Back to queued only when every slot it held went offline (lose_slots).
    State.RUNNING: (State.QUEUED, State.FINISHING, State.FAILED, State.CANCELLED, State.TIMED_OUT),
    State.FINISHING: (State.SUCCEEDED, State.FAILED),
}

# Jobs that hold no GPU yet: the operators may put them on hold, and a deadline may pass them by.
WAITING = (State.SUBMITTED, State.STAGING, State.QUEUED)
# The states the queue's figures count: the queue, and the jobs whose holds it waits for.
COUNTED = {State.QUEUED, State.RUNNING}


def _move(
    job_id: int,
    frm: str | tuple[str, ...],
    to: str,
    message: str = "",
    at=None,
    where: Q | None = None,
    notify: bool = True,
    **fields,
) -> bool:
    """Move a job from one of `frm` to `to` (and only while `where` holds); False when another process
    moved it first. A job that ends is emailed about to whoever submitted it, unless not `notify`. Once the
    move is committed, `state_changed` tells whoever listens."""
    sources = (frm,) if isinstance(frm, str) else frm
    for source in sources:
        if to not in TRANSITIONS.get(source, ()):
            raise ValueError(f"a job cannot go from {source} to {to}")
    now = at or timezone.now()
    if to in ENDED:
        fields.setdefault("ended_at", now)
    with transaction.atomic():
        previous = sources[0] if len(sources) == 1 else _locked_state(job_id, sources)
        jobs = Job.objects.filter(pk=job_id, state=previous).filter(where or Q())
        moved = previous is not None and jobs.update(state=to, modified=now, **fields)
        if moved:
            _moved([job_id], previous, to, now, message, notify)
    return bool(moved)


def _move_all(job_ids: list[int], frm: str, to: str, at, where: Q | None = None, **fields) -> list[int]:
    """_move for many jobs in one state, in one UPDATE and one insert of their timelines' lines; the ids of
    those moved, in the order given. Their rows are locked first, so exactly these are moved."""
    if to not in TRANSITIONS.get(frm, ()):
        raise ValueError(f"a job cannot go from {frm} to {to}")
    with transaction.atomic():
        jobs = Job.objects.filter(pk__in=job_ids, state=frm).filter(where or Q()).select_for_update()
        locked = set(jobs.order_by("pk").values_list("pk", flat=True))
        moving = [pk for pk in job_ids if pk in locked]
        if moving:
            Job.objects.filter(pk__in=moving).update(state=to, modified=at, **fields)
            _moved(moving, frm, to, at, message="", notify=True)
    return moving


def _moved(job_ids: list[int], previous: str, to: str, at, message: str, notify: bool) -> None:
    """What follows these jobs' move from `previous` to `to`: a line on each one's timeline, the queue's figures
    marked changed, the tasks it calls for, and `state_changed` for each once committed."""
    JobEvent.objects.bulk_create(JobEvent(job_id=pk, state=to, at=at, message=message) for pk in job_ids)
    if COUNTED & {previous, to}:
        transaction.on_commit(queue_figures.changed)
    if previous == State.QUEUED and to != State.RUNNING:
        enqueue.schedule()  # they left the queue: the jobs behind them move up, and may start now
    for job_id in job_ids:
        if to in ENDED and notify:
            enqueue.notify_ended(job_id)
        changed = partial(state_changed.send_robust, Job, job_id=job_id, state=to, previous=previous, at=at)
        transaction.on_commit(changed)


def _locked_state(job_id: int, sources: tuple[str, ...]) -> str | None:
    """Which of `sources` the job is in, its row locked until the move commits (the UPDATE would lock it at
    this point anyway), so the state left is known exactly; None when it is in none of them."""
    jobs = Job.objects.select_for_update().filter(pk=job_id, state__in=sources)
    return jobs.values_list("state", flat=True).first()


def begin_staging(job: Job, claim: str, lease_until: datetime) -> bool:
    """submitted → staging: the attempt holding `claim` owns the staging while it renews its lease.
    False when another attempt began it first, or the job was cancelled."""
    # A pass sized by a sample stages nothing: it takes the sample's staged copy over (one step on its timeline).
    message = f"staging {job.source_name}"
    if job.sample_id:
        message = f"taking over the staged copy of sample {job.sample_id}"
    return _move(
        job.pk, State.SUBMITTED, State.STAGING, message=message, staging_claim=claim, staging_lease_until=lease_until
    )


def queue(job: Job, at: datetime, message: str) -> bool:
    """staging → queued, its shards cut: the scheduler looks for its GPUs once this commits. False when
    it left staging meanwhile (cancelled)."""
    if not _move(job.pk, State.STAGING, State.QUEUED, at=at, queued_at=at, message=message):
        return False
    enqueue.schedule()
    return True


def start_hold(job: Job, gpus: list[Gpu]) -> list[Allocation]:
    """start_holds for one job, its slot tasks not sent: its allocations, or none when it did not start."""
    return start_holds([(job, gpus)]).get(job.pk, [])


def start_holds(plan: list[tuple[Job, list]], send: bool = False) -> dict[int, list[Allocation]]:
    """Start each job's hold on its GPUs (Gpu rows, or anything with their pk and queue): queued →
    running, one Allocation per GPU, every job in one UPDATE and every hold in one insert. A job held
    before (it lost every GPU with their nodes) has that much less of its hours left. Never a job the
    operators put on hold, even one put on hold since the scheduler read the queue, nor one whose
    deadline has come: those stay queued. When another scheduler took one of the GPUs first, none
    starts. With `send`, each hold's slot task is sent once committed. The allocations of each job
    started, by its id."""
    if not plan:
        return {}
    now = timezone.now()
    gpus_of = {job.pk: gpus for job, gpus in plan}
    earlier = _held_so_far(list(gpus_of))
    held_before = Case(
        *(When(pk=pk, then=Value(held)) for pk, held in earlier.items()),
        default=Value(timedelta()),
        output_field=DurationField(),
    )
    may_start = Q(on_hold_since=None) & (Q(deadline=None) | Q(deadline__gt=now))
    try:
        with transaction.atomic():
            started = _move_all(
                list(gpus_of), State.QUEUED, State.RUNNING, at=now, where=may_start, started_at=now,
                held_before=held_before,
            )  # fmt: skip
            holds = [Allocation(job_id=pk, gpu_id=gpu.pk, held_from=now) for pk in started for gpu in gpus_of[pk]]
            if send:
                for allocation in holds:
                    allocation.runner, allocation.runner_seen = uuid.uuid4().hex, now
            holds = Allocation.objects.bulk_create(holds)
            _rebudget(started)
    except IntegrityError:
        # Another scheduler took one of these GPUs first; the jobs stay queued.
        return {}
    queues = {gpu.pk: gpu.queue for gpus in gpus_of.values() for gpu in gpus}
    allocations: dict[int, list[Allocation]] = {pk: [] for pk in started}
    for allocation in holds:
        allocations[allocation.job_id].append(allocation)
        if send:
            enqueue.run_slot(allocation.job_id, allocation.pk, allocation.runner, queues[allocation.gpu_id])
    return allocations


def put_on_hold(job: Job, reason: str = "") -> bool:
    """An operator hold: the job, which holds no GPU yet, stages as before and keeps its place in the
    queue, but the scheduler passes it by until the hold is lifted. False when it is running or ended
    (cancel it instead), or on hold already. The timeline says "the operators"; the console's history
    says which one."""
    now = timezone.now()
    with transaction.atomic():
        waiting = Job.objects.filter(pk=job.pk, state__in=WAITING, on_hold_since=None)
        if not waiting.update(on_hold_since=now, on_hold_reason=reason, modified=now):
            return False
        why = f": {reason}" if reason else ""
        if _note(job, now, JobEvent.Hold.PUT, f"put on hold by the operators{why}") == State.QUEUED:
            _queue_changed()
    return True


def pin_fixed(job: Job) -> bool:
    """An operator pins a flexible job that holds no slot yet to a fixed request: all its GPUs at once, its
    width cap dropped. False when it is fixed already, or running or ended."""
    now = timezone.now()
    with transaction.atomic():
        flexible = Job.objects.filter(pk=job.pk, state__in=WAITING, request=Job.Request.FLEXIBLE)
        if not flexible.update(request=Job.Request.FIXED, max_gpus=None, modified=now):
            return False
        state = Job.objects.values_list("state", flat=True).get(pk=job.pk)
        message = "pinned to a fixed request by the operators"
        JobEvent.objects.create(job_id=job.pk, state=state, at=now, message=message)
        if state == State.QUEUED:
            _queue_changed()
    return True


def lift_hold(job: Job) -> bool:
    """End an operator hold: the job starts in its place in the queue once its GPUs are free. False
    when it is not on hold, or has ended."""
    now = timezone.now()
    with transaction.atomic():
        on_hold = Job.objects.filter(pk=job.pk, state__in=WAITING, on_hold_since__isnull=False)
        if not on_hold.update(on_hold_since=None, on_hold_reason="", modified=now):
            return False
        if _note(job, now, JobEvent.Hold.LIFTED, "hold lifted by the operators") == State.QUEUED:
            _queue_changed()
    return True


def _queue_changed() -> None:
    """Once committed, the queue's figures are worked out again, by a pass that may start a job."""
    transaction.on_commit(queue_figures.changed)
    enqueue.schedule()


def _note(job: Job, at, hold: str, message: str) -> str:
    """A line on the job's timeline for a hold put or lifted, under the state it is in (the row is locked by
    the update just made, so that is the state it was in); returns the state."""
    state = Job.objects.values_list("state", flat=True).get(pk=job.pk)
    JobEvent.objects.create(job_id=job.pk, state=state, at=at, hold=hold, message=message)
    return state


def _held_so_far(job_ids: list[int]) -> dict[int, timedelta]:
    """How long the earlier holds of those of these jobs that were held before lasted, by job."""
    ended = Allocation.objects.filter(job__in=job_ids, held_to__isnull=False)
    holds: dict[int, list[tuple]] = {}
    for job_id, start, end in ended.values_list("job_id", "held_from", "held_to"):
        holds.setdefault(job_id, []).append((start, end))
    return {pk: sum((end - start for start, end in hold_periods(held)), timedelta()) for pk, held in holds.items()}


def release(job: Job, at=None) -> bool:
    """End the job's hold: held_to on every open allocation, and one ledger entry for every GPU it
    held, each for its own time. Never after its time limit (its hours, or its deadline), however late
    a cancel, a failure or its last shard came. Safe to repeat; False when no hold was open."""
    now = timezone.now()
    ended = at or now
    limit = Job.objects.get(pk=job.pk).time_limit_at()
    ended = min(ended, limit) if limit else ended
    with transaction.atomic():
        open_holds = list(Allocation.objects.select_for_update().filter(job=job, held_to__isnull=True))
        ends = Greatest(Value(ended), F("held_from"))  # a hold never ends before it started
        ending = Allocation.objects.filter(pk__in=[a.pk for a in open_holds])
        ending.update(held_to=ends, modified=now)
        UsageHour.add(ending)
        held = list(Allocation.objects.filter(job=job))
        if held:
            holds = [(a.held_from, a.held_to) for a in held]
            hold_released.send(sender=Job, job=job, gpus=len({a.gpu_id for a in held}), holds=holds)
    if open_holds:
        enqueue.schedule()
    return bool(open_holds)


def lose_slots(job: Job, allocations: list[Allocation], at, node: str, cause: str = "") -> int:
    """Slots of a running job went offline with their node (or their worker stopped, the `cause`):
    these holds end at `at`, when the slots were last seen (a dead GPU is not metered), and their
    running shards go back to pending at once for the job's other slots. Only these holds: one that
    started since the caller read them is not lost. With no slot left the job goes back to the head
    of the queue, its meter stopped, and is held again when GPUs are free; unless its hours were up
    by then: it has timed out. No hold ends after the time limit. Returns how many holds ended."""
    now = timezone.now()
    with transaction.atomic():
        # The job's row first, as finish_pass and cancel lock it before its allocations.
        job = Job.objects.select_for_update().filter(pk=job.pk, state=State.RUNNING).first()
        if job is None:
            return 0
        ended = min(at, job.time_limit_at())
        held = Allocation.objects.select_for_update().filter(job=job, pk__in=[a.pk for a in allocations])
        lost = list(held.filter(held_to__isnull=True).select_related("gpu"))
        for allocation in lost:
            Allocation.objects.filter(pk=allocation.pk).update(held_to=max(ended, allocation.held_from), modified=now)
        if not lost:
            return 0
        UsageHour.add(Allocation.objects.filter(pk__in=[allocation.pk for allocation in lost]))
        gpus = [allocation.gpu for allocation in lost]
        returned = Shard.objects.filter(job=job, gpu__in=gpus, status=Shard.Status.RUNNING).update(
            status=Shard.Status.PENDING, claim="", lease_until=None
        )
        noun = "CPU slot" if gpus[0].kind == Gpu.Kind.CPU else "GPU"
        what = (
            f"{cause or f'node {node} went offline'} (last seen {at:%Y-%m-%d %H:%M:%S}): its {len(lost)} {noun}"
            f"{'s' if len(lost) != 1 else ''} released, {returned} running shard{'s' if returned != 1 else ''} returned"
        )
        if Allocation.objects.filter(job=job, held_to__isnull=True).exists():
            JobEvent.objects.create(job=job, state=State.RUNNING, at=now, message=f"{what} to the job's other slots")
            _rebudget([job.pk])
        elif ended < at:  # its hours were up before its last node went: nothing to queue again for
            reason = _past_limit(job)
            _move(job.pk, State.RUNNING, State.TIMED_OUT, message=f"{what}; it {reason}", error=f"The job {reason}.")
            _stop(job)
        else:
            _move(job.pk, State.RUNNING, State.QUEUED, at=now, message=f"{what}; no slot left, back in the queue")
            enqueue.schedule()
    log.warning("job %s: %s", job.pk, what)
    return len(lost)


def rejoin(job_id: int, gpu: Gpu) -> Allocation | None:
    """A slot the running job lost (its worker or its node stopped) is back: the job holds it again
    from now, and a slot task serves it, while the job runs on fewer slots than it asked for, has
    shards nobody has taken and hours left. None when it does not, or another job took the slot."""
    now = timezone.now()
    job = Job.objects.filter(pk=job_id, state=State.RUNNING).first()
    if job is None or not _short_of_slots(job):
        return None  # looked at before taking any lock: a heartbeat asks every beat
    try:
        with transaction.atomic():
            # The slot's row, then the job's, as the scheduler locks them: on PostgreSQL a scheduler
            # holding the slot would otherwise wait on this insert while this waits on its lock.
            if not Gpu.objects.select_for_update(skip_locked=True).filter(pk=gpu.pk).exists():
                return None
            job = Job.objects.select_for_update().filter(pk=job_id, state=State.RUNNING).first()
            if job is None or job.time_limit_passed() or not _short_of_slots(job):
                return None
            allocation = Allocation.objects.create(job=job, gpu=gpu, held_from=now)
            _rebudget([job.pk])
            noun = "CPU slot" if gpu.kind == Gpu.Kind.CPU else "GPU"
            message = f"{noun} {gpu.index} of node {gpu.node.name} back: held again"
            JobEvent.objects.create(job=job, state=State.RUNNING, at=now, message=message)
            send_runner(allocation)
    except IntegrityError:
        return None  # the slot went to another job meanwhile
    log.warning("job %s: %s", job_id, message)
    return allocation


def _short_of_slots(job: Job) -> bool:
    """Whether the job holds fewer slots than it asked for while shards wait that nobody has taken."""
    waiting = Shard.objects.filter(job=job, status=Shard.Status.PENDING).exists()
    return waiting and Allocation.objects.filter(job=job, held_to__isnull=True).count() < job.width_cap


def widen(plan: list[tuple[Job, list]]) -> dict[int, list[Allocation]]:
    """Running flexible jobs take more slots (Gpu rows, or anything with their pk and queue): one hold
    each from now, their slot tasks sent once committed, their time limits moved to match. None when
    another scheduler took one of the slots first. The holds made, by job."""
    if not plan:
        return {}
    now = timezone.now()
    queues = {slot.pk: slot.queue for _, slots in plan for slot in slots}
    try:
        with transaction.atomic():
            running = Job.objects.select_for_update().filter(pk__in=[job.pk for job, _ in plan], state=State.RUNNING)
            widening = set(running.filter(request=Job.Request.FLEXIBLE).values_list("pk", flat=True))
            holds = [
                Allocation(job_id=job.pk, gpu_id=slot.pk, held_from=now, runner=uuid.uuid4().hex, runner_seen=now)
                for job, slots in plan
                if job.pk in widening
                for slot in slots
            ]
            holds = Allocation.objects.bulk_create(holds)
            _rebudget(list(widening))
    except IntegrityError:
        return {}
    made: dict[int, list[Allocation]] = {}
    for allocation in holds:
        made.setdefault(allocation.job_id, []).append(allocation)
        enqueue.run_slot(allocation.job_id, allocation.pk, allocation.runner, queues[allocation.gpu_id])
    return made


def give_back(allocation_id: int, idle: bool = False) -> bool:
    """At a shard boundary, a flexible job's slot ends its hold: the scheduler asked for it back
    (Allocation.give_back), or, `idle`, no shard is left for it while its other slots run the last ones.
    Its last slot goes back only with shards left to run: the job is back in the queue, in its place, the
    meter off. A job whose data is still staging (`streaming`), fixed or flexible, gives back an idle slot,
    its last one too: no slot is held while it waits for bytes, and the job waits for them in the queue. A
    fixed job's other slots are then asked back at their next shard boundaries: it runs on its whole width
    or waits in the queue for it, never on part of it. False when the hold is not to end (a fixed job's
    not so asked, one not asked back, the job's limit passed: it times out instead)."""
    now = timezone.now()
    asked = Allocation.objects.filter(pk=allocation_id, held_to__isnull=True)
    if not idle and not asked.filter(give_back=True).exists():
        return False  # the slot asks this after every shard: one read, no lock, when it is not asked back
    with transaction.atomic():
        holder = Allocation.objects.filter(pk=allocation_id).order_by().values("job_id")
        job = Job.objects.select_for_update().filter(pk=Subquery(holder), state=State.RUNNING).first()
        waits_for_bytes = idle and job is not None and job.streaming
        if job is None or not (job.flexible or waits_for_bytes or not idle) or job.time_limit_passed(now):
            return False
        hold = asked if idle else asked.filter(give_back=True)
        allocation = hold.select_related("gpu", "gpu__node").order_by().first()
        others = Allocation.objects.filter(job=job, held_to__isnull=True).exclude(pk=allocation_id).count()
        pending = Shard.objects.filter(job=job, status=Shard.Status.PENDING).exists()
        if allocation is None or not (others or (pending and not idle) or waits_for_bytes):
            return False
        hold.update(held_to=now, give_back=True, modified=now)  # given back, not lost: no slot rejoins it
        UsageHour.add(Allocation.objects.filter(pk=allocation.pk))
        noun = "CPU slot" if allocation.gpu.kind == Gpu.Kind.CPU else "GPU"
        what = f"{noun} {allocation.gpu.index} of node {allocation.gpu.node.name} given back at a shard boundary"
        if waits_for_bytes:
            what += ": no staged shard was left for it"
            if others and not job.flexible:
                Allocation.objects.filter(job=job, held_to=None).update(give_back=True, modified=now)
                what += "; its other slots go back at their shard boundaries, a fixed request runs on all of them"
        if others:
            JobEvent.objects.create(job=job, state=State.RUNNING, at=now, message=f"{what}; it runs on {others}")
            _rebudget([job.pk])
        else:
            back = "back in the queue until more of its data is staged" if waits_for_bytes else "back in the queue"
            _move(job.pk, State.RUNNING, State.QUEUED, at=now, message=f"{what}, its last; {back}")
        enqueue.schedule()
    return True


def _rebudget(job_ids: list[int]) -> None:
    """Each flexible job's budget_ends_at, from its holds: when its GPU-seconds held (each hold's started
    seconds, as the ledger counts them) reach its budget at the width it holds now; a second early, so that
    the started second of each open hold cannot take it past. None while it holds no slot."""
    flexible = {
        pk: int(gpus * hours * 3600)
        for pk, gpus, hours in Job.objects.filter(pk__in=job_ids, request=Job.Request.FLEXIBLE).values_list(
            "pk", "gpus", "hours"
        )
    }
    if not flexible:
        return
    spent = dict.fromkeys(flexible, 0)
    opened: dict[int, list[float]] = {pk: [] for pk in flexible}
    holds = Allocation.objects.filter(job__in=flexible).order_by().values_list("job_id", "held_from", "held_to")
    for job_id, start, end in holds:
        if end is None:
            opened[job_id].append(start.timestamp())
        else:
            spent[job_id] += max(0, math.ceil((end - start).total_seconds()))
    for pk, budget in flexible.items():
        starts = opened[pk]
        ends = None
        if starts:
            ends = datetime.fromtimestamp((budget - spent[pk] + sum(starts)) / len(starts) - 1, tz=UTC)
        Job.objects.filter(pk=pk).update(budget_ends_at=ends)


def send_runner(allocation: Allocation) -> None:
    """After commit, send a slot task to serve this hold, with a new token: a task sent earlier for it
    stops at its next look, so a hold never has two (a message restored late, one sent again)."""
    send_runners([allocation])


def send_runners(allocations: list[Allocation]) -> None:
    """send_runner for each of these holds, their new tokens written in one UPDATE."""
    now = timezone.now()
    for allocation in allocations:
        allocation.runner, allocation.runner_seen = uuid.uuid4().hex, now
    Allocation.objects.bulk_update(allocations, ["runner", "runner_seen"])
    for allocation in allocations:
        enqueue.run_slot(allocation.job_id, allocation.pk, allocation.runner, allocation.gpu.queue)


def finish_pass(job: Job) -> bool:
    """The last shard is done: running → finishing, release the GPUs, assemble the output off them. Not while
    its data is still staging: more shards are to come."""
    now = timezone.now()
    with transaction.atomic():
        noun = job.held_noun or "GPU"
        done = f"last shard done; {noun}s released"
        if not _move(job.pk, State.RUNNING, State.FINISHING, message=done, at=now, where=Q(streaming=False)):
            return False
        release(job, at=now)
        enqueue.assemble(job.pk)
    return True


def succeed(job: Job, message: str) -> bool:
    """finishing → succeeded: its output is written and every record accounted for."""
    return _move(job.pk, State.FINISHING, State.SUCCEEDED, message=message)


def fail(job: Job, reason: str) -> bool:
    with transaction.atomic():
        current = Job.objects.values_list("state", flat=True).get(pk=job.pk)
        if current in ENDED or not _move(job.pk, current, State.FAILED, message=reason, error=reason):
            return False
        _stop(job)
    return True


def cancel(job: Job, by=None) -> bool:
    """Cancel before the pass ends; GPUs are released at once and finished shards kept. Whoever
    submitted it hears of it, unless they cancelled it themselves."""
    who = f" by {by}" if by else ""
    with transaction.atomic():
        frm = (State.SUBMITTED, State.STAGING, State.QUEUED, State.RUNNING)
        yourself = by is not None and by.pk == job.created_by_id
        if not _move(job.pk, frm, State.CANCELLED, message=f"cancelled{who}", notify=not yourself):
            return False
        _stop(job)
    return True


def time_out(job: Job) -> bool:
    """The hours asked for are up: the job ends, and its hold ends at the limit, however late the
    worker or beat noticed (a long batch, beat down): the partner never pays past the hours asked.
    A job whose every shard was settled by then (its last one done in the second its limit came) is
    finished, not timed out: its output is whole (False: it did not time out)."""
    with transaction.atomic():
        if _finished_at_limit(job):
            return False
        reason = _past_limit(job)
        if not _move(job.pk, State.RUNNING, State.TIMED_OUT, message=reason, error=f"The job {reason}."):
            return False
        job = Job.objects.get(pk=job.pk)  # the start of this hold, as the move found it
        _stop(job, held_to=min(timezone.now(), job.time_limit_at()))
    return True


def _finished_at_limit(job: Job) -> bool:
    """Finish the job, its holds ending at its limit, when its data is all staged and every shard settled."""
    shards = Shard.objects.filter(job=job)
    if not shards.exists() or shards.exclude(status__in=Shard.SETTLED).exists():
        return False
    done = "last shard done as its limit came; GPUs released"
    if not _move(job.pk, State.RUNNING, State.FINISHING, message=done, where=Q(streaming=False)):
        return False
    job = Job.objects.get(pk=job.pk)
    release(job, at=min(timezone.now(), job.time_limit_at()))
    enqueue.assemble(job.pk)
    return True


def _past_limit(job: Job) -> str:
    if job.deadline and job.time_limit_at() == job.deadline:
        return f"reached its deadline, {job.deadline:%Y-%m-%d %H:%M} UTC"
    if job.flexible:
        return f"spent its budget of {job.gpus * job.hours} {job.held_noun or 'GPU'}-hours"
    return f"ran past its {job.hours} h limit"


def miss_deadline(job: Job) -> bool:
    """The deadline came while the job still waited (submitted, staging or queued): it ends failed,
    without ever holding a GPU. False when it had moved on meanwhile."""
    when = f"Its deadline, {job.deadline:%Y-%m-%d %H:%M} UTC,"
    if job.started_at:  # queued again after losing its nodes: its first hold is in the ledger
        reason = f"{when} came before it could be held again; what it did before is kept."
    else:
        reason = f"{when} came before it could start; nothing was held."
    with transaction.atomic():
        if not _move(job.pk, WAITING, State.FAILED, message=reason, error=reason):
            return False
        _stop(job)
    return True


def _stop(job: Job, held_to=None) -> None:
    """After a job ends early: release its GPUs, return running shards, keep what finished."""
    release(job, at=held_to)
    Shard.objects.filter(job=job, status=Shard.Status.RUNNING).update(status=Shard.Status.PENDING, claim="")
    if Shard.objects.filter(job=job, status=Shard.Status.DONE).exists():
        enqueue.assemble(job.pk)
    else:
        enqueue.purge_staged_copy_if_due(job.pk)
