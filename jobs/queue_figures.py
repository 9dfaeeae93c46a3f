"""The queue's figures as the scheduler last worked them out, kept in Redis: each queued job's place,
how many of the jobs before it are on hold, and when it starts at the latest. A job's page, its live
fragment, `submit` and the operators' console read a job's figures in one look, however deep in the
queue it is.

The scheduling task works them out for the whole queue after a pass (jobs.scheduling.
refresh_queue_figures) when the queue changed since (`changed`, called by the lifecycle) or when
they are REFRESH_SECONDS old: latest starts move with the clock and the fleet. They are replaced
all at once, never half-written. A job queued since the last time has none yet, nor has any while
Redis is unreachable; JobFacts then works out that job's alone.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache

import redis
from django.conf import settings

from jobs.models import Job, State

log = logging.getLogger(__name__)

FIGURES = "e31:queue:figures"
CHANGED = "e31:queue:changed"
REFRESH_SECONDS = 5
_NEXT = f"{FIGURES}:next"
_AT = "at"  # the field that says when they were worked out; the others are job ids
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class QueueFigures:
    """A queued job's figures."""

    place: int
    on_hold_ahead: int
    latest_start: datetime | None


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)


def changed() -> None:
    """Something they count changed (a job queued, held, ended, put on hold or off it): the next pass
    works them out again."""
    try:
        _redis().set(CHANGED, 1)
    except redis.RedisError as error:
        log.warning("the queue's figures are not marked changed, Redis is unreachable: %s", error)


def due(now: datetime) -> bool:
    """Whether they are to be worked out again: the queue changed, or they are old. It takes the mark
    of a change, so a change made while they are worked out marks them again."""
    client = _redis()
    if client.getdel(CHANGED):
        return True
    at = client.hget(FIGURES, _AT)
    return at is None or (now - datetime.fromisoformat(at.decode())).total_seconds() >= REFRESH_SECONDS


def write(figures: dict[int, QueueFigures], at: datetime) -> None:
    """Replace the stored figures with these, worked out `at`, in one transaction."""
    fields = {str(pk): _dumps(found) for pk, found in figures.items()}
    fields[_AT] = at.isoformat()
    pipeline = _redis().pipeline(transaction=True)
    pipeline.delete(_NEXT)
    pipeline.hset(_NEXT, mapping=fields)
    pipeline.rename(_NEXT, FIGURES)
    pipeline.execute()


def read(job: Job) -> QueueFigures | None:
    return read_many([job]).get(job.pk)


def read_many(jobs: list[Job]) -> dict[int, QueueFigures]:
    """The stored figures of those of these jobs that are queued, by id; a job queued since they were
    worked out has none."""
    queued = [job.pk for job in jobs if job.state == State.QUEUED]
    if not queued:
        return {}
    try:
        stored = _redis().hmget(FIGURES, [str(pk) for pk in queued])
    except redis.RedisError as error:
        log.warning("the queue's figures are not read, Redis is unreachable: %s", error)
        return {}
    return {pk: _loads(raw) for pk, raw in zip(queued, stored, strict=True) if raw}


def _dumps(figures: QueueFigures) -> str:
    """Short, for a queue of ten thousand: the place, the jobs on hold before it, and the latest start
    in whole microseconds since the epoch ("-" for none)."""
    latest = (figures.latest_start - _EPOCH) // _MICROSECOND if figures.latest_start else "-"
    return f"{figures.place} {figures.on_hold_ahead} {latest}"


def _loads(raw: bytes) -> QueueFigures:
    place, on_hold_ahead, latest = raw.decode().split()
    latest = _EPOCH + int(latest) * _MICROSECOND if latest != "-" else None
    return QueueFigures(int(place), int(on_hold_ahead), latest)
