"""GPU discovery through the NVML module, with a fake NVML standing in for the driver."""

import pytest
from django.test import override_settings

from jobs.models import Gpu
from jobs.workers import node, nvml

FAKE = "tests.fakes.fake_nvml"


@override_settings(E31_NVML_MODULE=FAKE)
def test_it_finds_every_gpu_with_its_facts(monkeypatch):
    monkeypatch.setenv("E31_FAKE_GPUS", "8")
    gpus = nvml.discover()
    assert [gpu.index for gpu in gpus] == list(range(8))
    assert gpus[3].name == "NVIDIA H100 80GB HBM3"
    assert gpus[3].uuid == "GPU-00000000-0000-0000-0000-000000000003"
    assert gpus[3].memory_mb == 80 * 1024
    assert gpus[3].compute_capability == "9.0"
    assert gpus[3].driver == "550.54.15"


@override_settings(E31_NVML_MODULE=FAKE)
def test_it_finds_no_gpu_without_a_driver(monkeypatch):
    monkeypatch.setenv("E31_FAKE_GPUS", "0")
    assert nvml.discover() == []


def test_it_asks_the_real_nvml_without_failing_on_a_machine_without_a_driver():
    assert all(isinstance(gpu, nvml.GpuInfo) for gpu in nvml.discover())


@pytest.mark.django_db
@override_settings(E31_NVML_MODULE=FAKE)
def test_it_registers_one_slot_per_gpu_with_a_queue_each(monkeypatch):
    monkeypatch.setenv("E31_FAKE_GPUS", "2")
    slots = node.register("gpu-box", node.slot_specs(nvml.discover(), cpu_slots=4), driver="550.54.15")
    assert [(s.kind, s.index, s.queue) for s in slots] == [("gpu", 0, "slot.gpu-box.0"), ("gpu", 1, "slot.gpu-box.1")]
    assert slots[0].label == "GPU 0 (NVIDIA H100 80GB HBM3) on gpu-box"
    assert Gpu.objects.online().count() == 2


@pytest.mark.django_db
def test_it_labels_cpu_slots_as_such():
    slots = node.register("laptop", node.slot_specs([], cpu_slots=3))
    assert [slot.label for slot in slots] == [f"CPU slot {i} on laptop" for i in range(3)]
    node.go_offline("laptop")
    assert not Gpu.objects.online().exists()


@override_settings(E31_NVML_MODULE=FAKE)
def test_it_reads_each_gpus_utilisation_and_memory(monkeypatch):
    monkeypatch.setenv("E31_FAKE_GPUS", "3")
    assert nvml.readings() == {
        0: nvml.Reading(0, 0, 0),
        1: nvml.Reading(1, 10, 1024),
        2: nvml.Reading(2, 20, 2048),
    }
    monkeypatch.setenv("E31_FAKE_GPUS", "0")
    assert nvml.readings() == {}


@pytest.mark.django_db
@override_settings(E31_NVML_MODULE=FAKE)
def test_a_heartbeat_records_each_gpus_readings(monkeypatch):
    monkeypatch.setenv("E31_FAKE_GPUS", "2")
    specs = node.slot_specs(nvml.discover(), cpu_slots=4)
    node.register("gpu-box", specs, readings=nvml.readings())
    assert list(Gpu.objects.order_by("index").values_list("utilisation", "memory_used_mb")) == [(0, 0), (10, 1024)]
    node.register("gpu-box", specs, readings={})
    assert set(Gpu.objects.values_list("utilisation", "memory_used_mb")) == {(None, None)}, "no reading: none shown"
