"""What the charts are drawn from, written as it happens and pruned: each held GPU's readings (written by
its node's heartbeat), and once a minute each node's slots online, held and in use, and the queue's
length (written by beat's `sample_fleet`).

A hold's readings thin out as it ages, so that a long hold does not write a row per heartbeat: the next
is written once READING_SECONDS have passed and a READINGS_PER_SPAN-th of the hold so far, so a 4-hour
hold of one GPU writes 625 rows and a 72-hour one 1,308 (a beat every 5 s). Readings go READINGS_KEPT after
their hold ended; the fleet's samples go after FLEET_KEPT."""

from datetime import datetime, timedelta

from django.db.models import Count, Max, Q, Sum

from jobs.models import Allocation, Gpu, Job, NodeSample, QueueSample, SlotReading, State
from jobs.workers.nvml import Reading

READING_SECONDS = 10
READINGS_PER_SPAN = 240
READINGS_KEPT = timedelta(days=30)
FLEET_KEPT = timedelta(hours=25)  # the console draws the last day


def reading_due(held_from: datetime, last: datetime | None, now: datetime) -> bool:
    """Whether a hold's next reading is to be written now, given when its last one was."""
    if last is None:
        return True
    spacing = max(timedelta(seconds=READING_SECONDS), (now - held_from) / READINGS_PER_SPAN)
    return now - last >= spacing


def record_readings(slots: list[Gpu], readings: dict[int, Reading], now: datetime) -> int:
    """A heartbeat's readings of a node's GPUs, for the open holds on them whose next reading is due: one
    read and one insert. Returns the rows written."""
    by_slot = {slot.pk: readings[slot.index] for slot in slots if slot.index in readings}
    if not by_slot:
        return 0
    holds = (
        Allocation.objects.filter(gpu__in=by_slot, held_to__isnull=True)
        .annotate(last=Max("readings__at"))
        .values_list("pk", "gpu_id", "held_from", "last")
    )
    rows = [
        SlotReading(
            allocation_id=pk, at=now, utilisation=by_slot[gpu].utilisation, memory_used_mb=by_slot[gpu].memory_used_mb
        )
        for pk, gpu, held_from, last in holds
        if reading_due(held_from, last, now)
    ]
    SlotReading.objects.bulk_create(rows)
    return len(rows)


def sample_fleet(now: datetime) -> int:
    """This minute's sample of each node with a slot online, and of the queue; a second call in the same
    minute writes nothing. Then the samples older than FLEET_KEPT go. Returns the nodes sampled."""
    minute = now.replace(second=0, microsecond=0)
    online = (
        Gpu.objects.online()
        .order_by()
        .values("node_id")
        .annotate(slots=Count("pk"), used=Sum("utilisation"), reporting=Count("utilisation"))
    )
    held = dict(
        Allocation.objects.filter(held_to__isnull=True).order_by().values_list("gpu__node_id").annotate(Count("pk"))
    )
    rows = [
        NodeSample(
            node_id=row["node_id"],
            at=minute,
            slots=row["slots"],
            held=held.get(row["node_id"], 0),
            used=row["used"] / 100 if row["reporting"] else None,
        )
        for row in online
    ]
    NodeSample.objects.bulk_create(rows, ignore_conflicts=True)
    counts = Job.objects.filter(state__in=(State.QUEUED, State.RUNNING)).aggregate(
        queued=Count("pk", filter=Q(state=State.QUEUED)),
        on_hold=Count("pk", filter=Q(state=State.QUEUED, on_hold_since__isnull=False)),
        running=Count("pk", filter=Q(state=State.RUNNING)),
    )
    QueueSample.objects.bulk_create([QueueSample(at=minute, **counts)], ignore_conflicts=True)
    NodeSample.objects.filter(at__lt=now - FLEET_KEPT).delete()
    QueueSample.objects.filter(at__lt=now - FLEET_KEPT).delete()
    return len(rows)


def prune_readings(now: datetime) -> int:
    """The readings of holds that ended more than READINGS_KEPT ago go. Returns how many."""
    deleted, _ = SlotReading.objects.filter(allocation__held_to__lt=now - READINGS_KEPT).delete()
    return deleted
