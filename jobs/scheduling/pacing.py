"""When a job whose data is still staging may start: once the shards staged keep its slots busy until
the last byte arrives, so that no slot is held, and billed, while it waits for bytes.

The pass at its width takes staged bytes at `width × slot_rate`; staging adds them at `staging_rate`.
Where the pass is no faster than staging, it never catches up, and the job may start as soon as each
slot has a shard. Where it is faster, it eats into the backlog at the difference, and it may start
once the backlog lasts until staging ends. Before any of its shards has run, the slot rate is unknown:
the job starts once each slot has a shard, and a slot that runs out gives its hold back at once
(jobs.lifecycle.give_back), after which the rate its shards ran at paces the next start.
"""

from django.db.models import F, Sum

from jobs.models import Job, Shard


def may_start(
    *,
    width: int,
    backlog_shards: int,
    backlog_bytes: int,
    left_bytes: float | None,
    staging_rate: float,
    slot_rate: float | None,
) -> bool:
    """Whether a streaming job may start on `width` slots with this backlog of staged shards nobody took,
    `left_bytes` still to stage (None: not known) arriving at `staging_rate` bytes a second, its slots
    each taking `slot_rate` bytes a second (None: not measured yet)."""
    if backlog_shards < width:
        return False  # a slot that starts must find a shard
    if left_bytes == 0:
        return True
    if slot_rate is None or left_bytes is None or staging_rate <= 0:
        return True  # a slot's shard each; what its shards take paces the next start
    gaining = width * slot_rate - staging_rate
    if gaining <= 0:
        return True
    return backlog_bytes / gaining >= left_bytes / staging_rate


def slot_rate(job: Job) -> float | None:
    """Staged bytes a second one of the job's slots took, over the shards it has done; None before any."""
    done = Shard.objects.filter(job=job, status=Shard.Status.DONE, started_at__isnull=False)
    totals = done.aggregate(bytes=Sum(F("end_byte") - F("start_byte")), seconds=Sum(F("finished_at") - F("started_at")))
    seconds = totals["seconds"].total_seconds() if totals["seconds"] else 0.0
    return totals["bytes"] / seconds if totals["bytes"] and seconds > 0 else None
