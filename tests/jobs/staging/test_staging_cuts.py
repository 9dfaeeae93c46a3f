"""Cutting a staged dataset into shards: every record in exactly one shard, whatever its size."""

import itertools

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from jobs.models import State
from jobs.staging.describe import describe_and_cut
from jobs.staging.progress import StagingProgress
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("rows", [*range(1, 80), 250, 2501])
def test_it_puts_every_record_in_exactly_one_shard(organisation, monkeypatch, rows):
    monkeypatch.setattr("jobs.staging.shards.GRAIN", 5)
    monkeypatch.setattr("jobs.staging.shards.MAX_CUT_POINTS", 6)  # forces the cut points to be halved, several times
    job = make_job(organisation, State.STAGING, source_name="n.csv", gpus=2)
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
