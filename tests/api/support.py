"""What the API's tests share: a token for a user, a test client that sends it, and a finished job with
an output and its hold on the ledger."""

import json
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.test import Client

from api.models import ApiToken
from billing.models import LedgerEntry
from jobs.models import Job, State
from tests.factories import make_job


def token_for(user, name: str = "laptop", days: int | None = None) -> str:
    _, token = ApiToken.objects.create(user, expiry=days and timedelta(days=days), name=name)
    return token


def api_client(token: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


OUTPUT = {
    "output.parquet": bytes(range(256)) * 40,  # 10,240 bytes, each position's byte known
    "rejects.csv": b"position,reason\n",
    "manifest.json": json.dumps({"records_out": 3, "records_rejected": 0}).encode(),
}


def entry(job, *, ended: datetime, kind: str = LedgerEntry.Kind.HOLD, amount: str = "3.6000") -> LedgerEntry:
    """A ledger entry for `job`, appended as the meter does, ending at `ended` after an hour on one GPU."""
    written, _ = LedgerEntry.objects.append(
        organisation=job.organisation, job=job, kind=kind, gpus=1, held_from=ended - timedelta(hours=1),
        held_to=ended, seconds=3600, gpu_hours=Decimal("1"), rate=Decimal("3.6"), currency="USD",
        amount=Decimal(amount), reason="a test's correction" if kind == LedgerEntry.Kind.CORRECTION else "",
    )  # fmt: skip
    return written


def finished(organisation, **fields) -> Job:
    """A succeeded job with an output (OUTPUT's files in storage) and its hold on the ledger."""
    job = make_job(organisation, State.SUCCEEDED, **fields)
    job.output_path = f"{job.storage_prefix}/output"
    job.output_files = list(OUTPUT)
    job.save(update_fields=["output_path", "output_files"])
    for name, content in OUTPUT.items():
        path = f"{job.output_path}/{name}"
        default_storage.delete(path)
        default_storage.save(path, ContentFile(content))
    entry(job, ended=job.ended_at)
    return job
