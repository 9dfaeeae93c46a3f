"""The queue policy a scheduling pass asks (jobs.scheduling): which job goes first, and how wide a flexible job
runs. Apart from the mechanism (slots, claims, reservations, the pass) so that a policy can be changed and
measured alone (`bench/replay.py --suite`).

A row here is the queued job as the pass reads it (`jobs.scheduling._Queued`): its deadline, whether it was
told at submit that the deadline can be met, its GPUs, width cap, arrival and id.
"""

import math
from datetime import datetime
from typing import Protocol


class _Queued(Protocol):
    """What the policy reads of a row (jobs.scheduling._Queued), named here so the policy imports nothing of the
    pass that asks it."""

    pk: int
    gpus: int
    deadline: datetime | None
    deadline_feasible: bool | None

    @property
    def arrival(self) -> float: ...

    @property
    def width_cap(self) -> int: ...


# A flexible job runs wider than its request only while each of its slots has this many of its shards left to
# take: a slot's start on a job (its warm-up: the model loaded, the first batch) is billed to the job's budget,
# and spread over a few shards it costs a few per cent of it, not the slack between the request and the work.
SHARDS_PER_EXTRA_SLOT = 8


def is_due(row: "_Queued") -> bool:
    """Whether it is a deadline job the scheduler keeps on time: one whose deadline could not be met when it
    was submitted runs as best effort."""
    return bool(row.deadline) and row.deadline_feasible is not False


def order(row: "_Queued", fair: tuple | None) -> tuple:
    """Its place in the order, smallest first: jobs with a deadline they can meet (is_due), earliest deadline
    first (EDF); then the rest by their place in the fair share (`fair`, see place)."""
    if is_due(row):
        return (0, row.deadline.timestamp(), 0.0, row.arrival, row.pk)
    return (1, *fair)


# An organisation that held nothing lately weighs its jobs' work left by this share of the mean recent GPU-hours
# of those that did: its jobs go ahead, but not at any length.
FAIR_SHARE_FLOOR = 0.1


def fair_scales(usage: dict[int, float], weights: dict[int, float]) -> tuple[dict[int, float], float]:
    """Each organisation's scale of its jobs' work left in the fair share, by id, and the floor: its recent
    GPU-hours (`usage`) plus the floor, FAIR_SHARE_FLOOR of the mean of those that held any (one GPU-hour when
    none did), over its weight. An organisation not in the scales has the floor over its weight."""
    held = [hours for hours in usage.values() if hours > 0]
    floor = FAIR_SHARE_FLOOR * sum(held) / len(held) if held else 1.0
    return {org: (hours + floor) / weights.get(org, 1.0) for org, hours in usage.items() if hours > 0}, floor


def fair_tag(left: float, scale: float) -> float:
    """A job's tag in the fair share: its GPU-hours left (`left` in GPU-seconds) times its organisation's scale."""
    return max(0.0, left) / 3600 * scale


def place(tag: float, left: float, row: "_Queued") -> tuple:
    """A job's place in the fair share, smallest first: its tag (jobs.scheduling._Fair), then least work left,
    arrival."""
    return (tag, max(0.0, left), row.arrival, row.pk)


def useful_width(row: "_Queued", pending: int) -> int:
    """The most slots a flexible job uses well with `pending` shards left to take: its request's width, or
    more up to its cap while each slot has SHARDS_PER_EXTRA_SLOT of them (never more slots than shards)."""
    return min(row.width_cap, pending, max(row.gpus, math.ceil(pending / SHARDS_PER_EXTRA_SLOT)))


# A deadline job is sized to be done when this share of the time to its deadline has gone: the slots it grows
# into come back from other jobs at their shard boundaries, later than the pass that asked for them.
ON_TIME_SHARE = 0.75


def can_promise(finish: datetime | None, deadline: datetime, now: datetime) -> bool:
    """Whether a job expected to end at `finish` is told at submit that its deadline can be met: only when it ends
    within ON_TIME_SHARE of the time from now to the deadline. The outlook takes the slots asked back as free
    at their expected shard boundaries, and they can come back later: issue 41 asks 99 % of the promises kept."""
    return finish is not None and finish <= now + (deadline - now) * ON_TIME_SHARE


def on_time_width(row: "_Queued", left: float, now: datetime, shard: float = 0.0) -> int:
    """How many slots a flexible job needs from now on to do `left` GPU-seconds by its deadline, done at
    ON_TIME_SHARE of the time left (at least one); one without a deadline. With `shard`, the seconds a shard of a
    running job takes: its work is whole shards, each slot first ends the shard it is in (or starts on the job),
    and only the shards that fit whole count; the cap when not one does."""
    if row.deadline is None or row.deadline_feasible is False:
        return 1
    seconds = max(1.0, (row.deadline - now).total_seconds() * ON_TIME_SHARE)
    if shard <= 0:
        return max(1, min(row.width_cap, math.ceil(left / seconds)))
    rounds = math.floor((seconds - shard) / shard)  # the shards a slot does by the deadline
    if rounds < 1:
        return row.width_cap
    return max(1, min(row.width_cap, math.ceil(math.ceil(left / shard) / rounds)))


def unmeasured_width(row: "_Queued", on_time: int) -> int:
    """The most slots a flexible job holds before it has done a shard: its request's width (its cap, when that
    is narrower), or `on_time`, the width that keeps it on time. Its work is not known yet (a request may ask for
    more than it, or barely enough), and each slot's start is billed to its budget."""
    return max(on_time, min(row.gpus, row.width_cap))


def affordable_width(held: int, left: float, budget: float, shard: float) -> int:
    """The most slots a running flexible job can hold without running out of its budget before its work is
    done: the `held` ones, and one more for each shard's worth of `budget` (GPU-seconds it may still hold)
    beyond the work `left` and the shards its held slots are in. A slot's start on the job is billed, and
    priced here at a shard: widening a job whose request is close to its work would otherwise time it out."""
    if shard <= 0:
        return held
    return held + max(0, math.floor((budget - left - held * shard) / shard))
