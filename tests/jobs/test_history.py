"""The histories the charts are drawn from: a held GPU's readings written by its node's heartbeat, thinning
out as the hold ages; once a minute each node's slots online, held and used, and the queue; each pruned."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import history, lifecycle
from jobs.models import Allocation, Gpu, Node, NodeSample, QueueSample, SlotReading, State
from jobs.workers import node, nvml
from tests.factories import make_job

pytestmark = pytest.mark.django_db

FAKE = "tests.fakes.fake_nvml"


@pytest.fixture
def gpu_box(monkeypatch):
    """A node of two fake GPUs, registered by its first heartbeat."""
    monkeypatch.setenv("E31_FAKE_GPUS", "2")
    with override_settings(E31_NVML_MODULE=FAKE):
        specs = node.slot_specs(nvml.discover(), cpu_slots=4)
        yield specs, node.register("gpu-box", specs, readings=nvml.readings())


def test_a_heartbeat_writes_each_held_gpus_reading(organisation, gpu_box):
    specs, slots = gpu_box
    job = make_job(organisation, State.QUEUED, gpus=1)
    assert lifecycle.start_hold(job, slots[1:])
    assert not SlotReading.objects.exists(), "nothing held at the first beat"
    with override_settings(E31_NVML_MODULE=FAKE):
        node.register("gpu-box", specs, readings=nvml.readings())
        node.register("gpu-box", specs, readings=nvml.readings())
    reading = SlotReading.objects.get()
    assert (reading.allocation.gpu, reading.utilisation, reading.memory_used_mb) == (slots[1], 10, 1024)
    assert SlotReading.objects.count() == 1, "the second beat came too soon after the first"


def test_a_cpu_slots_heartbeat_writes_no_reading(organisation, online_slots):
    job = make_job(organisation, State.QUEUED, gpus=1)
    lifecycle.start_hold(job, online_slots[:1])
    node.register("fake-node", node.slot_specs([], cpu_slots=4))
    assert not SlotReading.objects.exists()


def test_the_readings_of_a_hold_thin_out_as_it_ages():
    now = timezone.now()
    assert history.reading_due(now, None, now), "the first at once"
    assert not history.reading_due(now - timedelta(minutes=1), now - timedelta(seconds=9), now)
    assert history.reading_due(now - timedelta(minutes=1), now - timedelta(seconds=10), now)
    four_hours_in = now - timedelta(hours=4)
    assert not history.reading_due(four_hours_in, now - timedelta(seconds=59), now), "a minute apart by then"
    assert history.reading_due(four_hours_in, now - timedelta(seconds=60), now)


@pytest.mark.parametrize(("hours", "written_in_all"), [(4, 625), (72, 1308)])
def test_a_long_hold_writes_a_bounded_number_of_readings(hours, written_in_all):
    held_from = timezone.now()
    last, written = None, 0
    for beat in range(0, hours * 3600, 5):
        at = held_from + timedelta(seconds=beat)
        if history.reading_due(held_from, last, at):
            last, written = at, written + 1
    assert written == written_in_all


def test_it_samples_each_online_node_and_the_queue_once_a_minute(organisation, online_slots, gpu_box):
    _, slots = gpu_box
    Gpu.objects.filter(pk=slots[1].pk).update(utilisation=80)
    held = make_job(organisation, State.QUEUED, gpus=2)
    lifecycle.start_hold(held, slots)
    make_job(organisation, State.QUEUED)
    lifecycle.put_on_hold(make_job(organisation, State.QUEUED), reason="")
    Node.objects.create(name="gone", hostname="gone")
    now = timezone.now().replace(second=30)
    assert history.sample_fleet(now) == 2, "the two nodes online"
    samples = {s.node.name: (s.slots, s.held, s.used) for s in NodeSample.objects.select_related("node")}
    assert samples == {"gpu-box": (2, 2, 0.8), "fake-node": (4, 0, None)}, "CPU slots report no utilisation"
    queue = QueueSample.objects.get()
    assert (queue.at, queue.queued, queue.on_hold, queue.running) == (now.replace(second=0, microsecond=0), 2, 1, 1)
    history.sample_fleet(now + timedelta(seconds=20))
    assert NodeSample.objects.count() == 2 and QueueSample.objects.count() == 1, "once in a minute"


def test_the_fleets_samples_go_after_a_day(online_slots):
    now = timezone.now()
    history.sample_fleet(now - timedelta(hours=26))
    history.sample_fleet(now - timedelta(hours=24))
    history.sample_fleet(now)
    assert NodeSample.objects.count() == QueueSample.objects.count() == 2


def test_a_holds_readings_go_a_month_after_it_ended(organisation, online_slots):
    now = timezone.now()
    job = make_job(organisation, State.QUEUED, gpus=2)
    lifecycle.start_hold(job, online_slots[:2])
    old, recent = Allocation.objects.filter(job=job)
    for allocation in (old, recent):
        SlotReading.objects.create(allocation=allocation, at=now - timedelta(days=40), utilisation=1, memory_used_mb=1)
    Allocation.objects.filter(pk=old.pk).update(held_to=now - timedelta(days=31))
    Allocation.objects.filter(pk=recent.pk).update(held_to=now - timedelta(days=29))
    assert history.prune_readings(now) == 1
    assert SlotReading.objects.get().allocation == recent


def test_beat_samples_the_fleet_every_minute(settings):
    assert settings.CELERY_BEAT_SCHEDULE["sample-the-fleet"] == {"task": "jobs.tasks.sample_fleet", "schedule": 60.0}


def test_the_readings_cost_a_heartbeat_one_read_and_one_insert(organisation, gpu_box):
    specs, slots = gpu_box

    def beat() -> list[str]:
        with override_settings(E31_NVML_MODULE=FAKE), CaptureQueriesContext(connection) as queries:
            node.register("gpu-box", specs, readings=nvml.readings())
        return [query["sql"] for query in queries]

    before = beat()
    assert sum('"jobs_slotreading"' in sql for sql in before) == 1, "the read, which finds no hold"
    lifecycle.start_hold(make_job(organisation, State.QUEUED, gpus=2), slots)
    held = beat()
    assert len(held) == len(before) + 1 and sum('INSERT INTO "jobs_slotreading"' in sql for sql in held) == 1
    assert SlotReading.objects.count() == 2, "one insert for both GPUs"
