"""Cutting a staged dataset into shards: every record in exactly one shard, whatever its size."""

import itertools

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from jobs import processors
from jobs.models import State
from jobs.staging.describe import describe_and_cut
from jobs.staging.progress import StagingProgress
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("rows", [*range(1, 80), 250, 2501])
def test_it_puts_every_record_in_exactly_one_shard(organisation, monkeypatch, rows):
    job = make_job(organisation, State.STAGING, source_name="n.csv", gpus=2)
    monkeypatch.setattr(processors.get(job.work), "grain", 5)
    monkeypatch.setattr("jobs.staging.shards.MAX_CUT_POINTS", 6)  # forces the cut points to be halved, several times
    data = b"n,text\n" + b"".join(b"%d,row %d\n" % (n, n) for n in range(1, rows + 1))
    path = default_storage.save(f"test-cuts/{rows}.csv", ContentFile(data))
    try:
        _, _, total, shards = describe_and_cut(job, path, StagingProgress(job.pk, job.staging_claim))
    finally:
        default_storage.delete(path)
    assert total == rows
    assert sum(shard["record_count"] for shard in shards) == rows
    assert [shard["first_record"] for shard in shards] == [
        1 + sum(s["record_count"] for s in shards[:i]) for i in range(len(shards))
    ]
    assert shards[0]["start_byte"] == len(b"n,text\n") and shards[-1]["end_byte"] == len(data)
    assert all(a["end_byte"] == b["start_byte"] for a, b in itertools.pairwise(shards))
    last = shards[-1]
    assert data[last["start_byte"] :].startswith(b"%d," % last["first_record"])


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_it_makes_the_last_shards_smaller_on_several_gpus(organisation, settings, gpus):
    settings.E31_SHARD_RECORDS = 10_000
    job = make_job(organisation, State.STAGING, source_name="n.csv", gpus=gpus)
    data = b"n\n" + b"".join(b"%d\n" % n for n in range(1, 200_001))
    path = default_storage.save("test-cuts/taper.csv", ContentFile(data))
    try:
        _, _, total, shards = describe_and_cut(job, path, StagingProgress(job.pk, job.staging_claim))
    finally:
        default_storage.delete(path)
    sizes = [shard["record_count"] for shard in shards]
    assert sum(sizes) == total == 200_000
    if gpus == 1:
        assert set(sizes[:-1]) == {10_000}, "one GPU waits for no other: its shards stay whole"
        return
    assert sizes[0] == 10_000 and sizes[-2] < sizes[len(sizes) // 2], "full shards first, smaller ones last"
    assert all(later <= earlier for earlier, later in itertools.pairwise(sizes[:-1])), "never larger again"
    assert max(sizes[-gpus - 1 : -1]) <= 10_000 // 8 + 250, "each GPU's last shard about an eighth of a full one"


@pytest.mark.parametrize("name, data", [("p.jsonl", b'{"text": "prompt %d"}\n'), ("p.csv", b'%d,"prompt"\n')])
def test_a_small_dataset_for_a_model_still_gives_every_gpu_shards_of_its_own(organisation, name, data):
    """600 prompts take a minute of a CPU slot's generate: cut every 250 records, two slots got three
    shards and one of them idled, held, for a third of the pass."""
    job = make_job(
        organisation,
        State.STAGING,
        source_name=name,
        gpus=2,
        work="generate",
        params=processors.get("generate").validate_params({}),
    )
    header = b"n,text\n" if name.endswith(".csv") else b""
    path = default_storage.save(f"test-cuts/{name}", ContentFile(header + b"".join(data % n for n in range(600))))
    try:
        _, _, total, shards = describe_and_cut(job, path, StagingProgress(job.pk, job.staging_claim))
    finally:
        default_storage.delete(path)
    sizes = [shard["record_count"] for shard in shards]
    assert total == sum(sizes) == 600
    assert len(sizes) >= 8, sizes
    assert max(sizes) <= 600 // 8 + processors.get("generate").grain
