"""A worker machine's record: its node and slots registered, kept alive by heartbeats, taken offline,
and every hold on its slots served by a live slot task."""

import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from jobs import enqueue, history, lifecycle, scheduling
from jobs.models import Allocation, Gpu, Node, Shard, State
from jobs.workers.nvml import GpuInfo, Reading


@dataclass(frozen=True)
class SlotSpec:
    index: int
    kind: str
    name: str
    uuid: str = ""
    memory_mb: int | None = None
    compute_capability: str = ""


def slot_specs(gpus: list[GpuInfo], cpu_slots: int) -> list[SlotSpec]:
    if gpus:
        return [SlotSpec(g.index, Gpu.Kind.GPU, g.name, g.uuid, g.memory_mb, g.compute_capability) for g in gpus]
    return [SlotSpec(index, Gpu.Kind.CPU, "CPU slot") for index in range(cpu_slots)]


def queue_name(node_name: str, index: int) -> str:
    return f"slot.{node_name}.{index}"


def default_node_name() -> str:
    return socket.gethostname()


def register(
    node_name: str,
    specs: list[SlotSpec],
    driver: str = "",
    alive: set[int] | None = None,
    readings: dict[int, Reading] | None = None,
    work_kinds: list[str] | None = None,
    seen: datetime | None = None,
) -> list[Gpu]:
    """Create or refresh the node and its slots; slots in `alive` (all by default) are seen now, or at
    `seen` (when their liveness was checked), with their GPU's utilisation and memory in use when NVML
    gave `readings`; the others keep when they were last seen (slot_stopped, which ends their holds
    then, clears it). `work_kinds`, when given, are the kinds the node's slots can run. The readings of
    held GPUs go into their holds' history."""
    seen = seen or timezone.now()
    defaults = {"hostname": socket.gethostname(), "driver": driver, "last_seen": seen}
    if work_kinds is not None:
        defaults["work_kinds"] = work_kinds
    node, _ = Node.objects.update_or_create(name=node_name, defaults=defaults)
    slots = []
    for spec in specs:
        reading = (readings or {}).get(spec.index)
        fields = {
            "kind": spec.kind,
            "name": spec.name,
            "uuid": spec.uuid,
            "memory_mb": spec.memory_mb,
            "compute_capability": spec.compute_capability,
            "queue": queue_name(node_name, spec.index),
            "utilisation": reading.utilisation if reading else None,
            "memory_used_mb": reading.memory_used_mb if reading else None,
        }
        if alive is None or spec.index in alive:
            fields["last_seen"] = seen
        slot, _ = Gpu.objects.update_or_create(node=node, index=spec.index, defaults=fields)
        slots.append(slot)
    Gpu.objects.filter(node=node).exclude(index__in=[spec.index for spec in specs]).update(last_seen=None)
    if readings:
        history.record_readings(slots, readings, seen)
    return slots


def go_offline(node_name: str) -> None:
    """The node stops (its gpuworker is asked to): it is offline now, and its holds end now."""
    now = timezone.now()
    Node.objects.filter(name=node_name).update(last_seen=None)
    Gpu.objects.filter(node__name=node_name).update(last_seen=None)
    take_offline(Allocation.objects.filter(gpu__node__name=node_name), now)


def ask_for_a_schedule(node_name: str, first: bool) -> None:
    """Send the scheduler on the node's first beat, and while a job waits that it has a slot for."""
    if first or waited_for(node_name):
        enqueue.schedule()


def waited_for(node_name: str) -> bool:
    """Whether a job is queued while this node has a free slot. The scheduler runs when staging ends
    and when a hold ends; this catches what those missed — a schedule that skipped slots whose rows a
    heartbeat had locked, or its message lost while the broker was away — within a heartbeat."""
    return scheduling.waiting().exists() and Gpu.objects.filter(node__name=node_name).free().exists()


def take_silent_nodes_offline() -> list[int]:
    """Nodes past their heartbeat deadline (E31_NODE_TIMEOUT_SECONDS) that still hold slots of running
    jobs: each such hold ends when its node was last seen, and its job carries on without it. Run by
    every live node's heartbeat and by beat's reconcile; safe to run anywhere, any number of times.
    Returns the jobs that lost slots."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.E31_NODE_TIMEOUT_SECONDS)
    silent = Q(gpu__node__last_seen__lt=cutoff) | Q(gpu__node__last_seen__isnull=True)
    return take_offline(Allocation.objects.filter(silent), now)


def restarted(node_name: str) -> list[int]:
    """The node's gpuworker starts: a hold its slots still have is from before it died, and ends when
    the node was last seen, before the node registers again and would look alive throughout. Its
    slots are offline until their workers are ready. Returns the jobs that lost slots."""
    Gpu.objects.filter(node__name=node_name).update(last_seen=None)  # first: no hold starts on them meanwhile
    return take_offline(Allocation.objects.filter(gpu__node__name=node_name), timezone.now())


def slot_stopped(node_name: str, index: int) -> list[int]:
    """A slot's worker exited (killed, or crashed): the slot's holds end when it was last seen alive,
    and it is offline until its worker is ready again. Returns the jobs that lost the slot."""
    slot = Gpu.objects.filter(node__name=node_name, index=index).first()
    if slot is None:
        return []
    now = timezone.now()
    Gpu.objects.filter(pk=slot.pk).update(last_seen=None)  # first: no hold starts on it meanwhile
    noun = "CPU slot" if slot.kind == Gpu.Kind.CPU else "GPU"
    cause = f"the worker of {noun} {index} on node {node_name} stopped"
    return take_offline(Allocation.objects.filter(gpu=slot), now, at=slot.last_seen or now, cause=cause)


def serve_held_slots(node_name: str, ready: set[int]) -> list[int]:
    """Every hold on this node's ready slots is served by a live slot task, within seconds of a fault,
    and billed only while it is. A hold whose task went silent (its message lost with Redis, a
    continuation that could not be sent), with no live lease on its slot, ends when the task last
    reported; then a slot that a running job lost (so, or by a restart) rejoins that job with a new
    hold and a new task, unless the broker refused a task this beat. Returns the allocations a task
    was sent for."""
    now = timezone.now()
    slots = Gpu.objects.filter(node__name=node_name, index__in=ready, last_seen__isnull=False)
    quiet = now - timedelta(seconds=settings.E31_NODE_TIMEOUT_SECONDS)
    silent = Allocation.objects.filter(gpu__in=slots, held_to__isnull=True, job__state=State.RUNNING).filter(
        Q(runner_seen__lt=quiet) | Q(runner_seen__isnull=True, held_from__lt=quiet)
    )
    for allocation in silent.select_related("gpu"):
        if _busy(allocation.gpu, now):
            continue
        noun = "CPU slot" if allocation.gpu.kind == Gpu.Kind.CPU else "GPU"
        cause = f"the task serving {noun} {allocation.gpu.index} on node {node_name} was lost"
        reported = allocation.runner_seen or allocation.held_from
        take_offline(Allocation.objects.filter(pk=allocation.pk), now, at=reported, cause=cause)
    sent = []
    for slot in slots.free():
        lost = Allocation.objects.filter(gpu=slot, held_to__isnull=False, give_back=False, job__state=State.RUNNING)
        for job_id in lost.values_list("job_id", flat=True).distinct():
            if enqueue.refused():
                return sent  # a hold now would wait, billed, for a broker that is away
            if allocation := lifecycle.rejoin(job_id, slot):
                sent.append(allocation.pk)
                break
    return sent


def _busy(slot: Gpu, now) -> bool:
    """Whether a live process of this machine runs a shard on the slot under a live lease, for this
    job or one before. A lease whose process is gone (a pool process killed) does not count: the
    slot's node sees its own processes, and need not wait a lease to know."""
    running = Shard.objects.filter(gpu=slot, status=Shard.Status.RUNNING, lease_until__gte=now)
    return any(pid and process_runs(pid) for pid in running.values_list("worker_pid", flat=True))


def process_runs(pid: int) -> bool:
    """Whether a process with this id runs on this machine (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return True  # it cannot be told: the lease stands


def take_offline(allocations, now, at=None, cause: str = "") -> list[int]:
    """End these open holds of running jobs, one node and job at a time (lifecycle.lose_slots), when
    the node was last seen unless `at` says when."""
    stranded = allocations.filter(held_to__isnull=True, job__state=State.RUNNING).select_related("gpu__node", "job")
    by_node_and_job: dict[tuple[int, int], list[Allocation]] = {}
    for allocation in stranded:
        by_node_and_job.setdefault((allocation.gpu.node_id, allocation.job_id), []).append(allocation)
    jobs = []
    for held in by_node_and_job.values():
        node, job = held[0].gpu.node, held[0].job
        ended = at or node.last_seen or now
        if lifecycle.lose_slots(job, held, at=ended, node=node.name, cause=cause):
            jobs.append(job.pk)
    return jobs
