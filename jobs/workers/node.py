"""A worker machine's record: its node and slots registered, kept alive by heartbeats, taken offline."""

import socket
from dataclasses import dataclass

from django.utils import timezone

from jobs.models import Gpu, Node
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
) -> list[Gpu]:
    """Create or refresh the node and its slots; slots in `alive` (all by default) are seen now, with
    their GPU's utilisation and memory in use when NVML gave `readings`."""
    now = timezone.now()
    node, _ = Node.objects.update_or_create(
        name=node_name, defaults={"hostname": socket.gethostname(), "driver": driver, "last_seen": now}
    )
    slots = []
    for spec in specs:
        seen = now if alive is None or spec.index in alive else None
        reading = (readings or {}).get(spec.index)
        slot, _ = Gpu.objects.update_or_create(
            node=node,
            index=spec.index,
            defaults={
                "kind": spec.kind,
                "name": spec.name,
                "uuid": spec.uuid,
                "memory_mb": spec.memory_mb,
                "compute_capability": spec.compute_capability,
                "queue": queue_name(node_name, spec.index),
                "last_seen": seen,
                "utilisation": reading.utilisation if reading else None,
                "memory_used_mb": reading.memory_used_mb if reading else None,
            },
        )
        slots.append(slot)
    Gpu.objects.filter(node=node).exclude(index__in=[spec.index for spec in specs]).update(last_seen=None)
    return slots


def go_offline(node_name: str) -> None:
    Node.objects.filter(name=node_name).update(last_seen=None)
    Gpu.objects.filter(node__name=node_name).update(last_seen=None)
