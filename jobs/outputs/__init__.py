"""Outputs: each shard's part written under its own claim, then the job's output assembled from them."""

import pyarrow as pa
from django.core.files import File

from jobs import processors
from jobs.models import Job
from jobs.processors import Context

RECORD_COLUMN = "_record"
REJECT_SCHEMA = pa.schema([("record", pa.int64()), ("line", pa.int64()), ("reason", pa.string()), ("raw", pa.string())])


def context_for(job: Job, device: str = "cpu", slot: int | None = None) -> Context:
    return Context(params=job.params, plan=job.plan, layout=job.layout, device=device, slot=slot, model=job.model_path)


def output_schema(job: Job) -> pa.Schema:
    """The processor's schema with the input position of each record in front; a reducing
    processor's partial summaries have no record positions."""
    processor = processors.get(job.work)
    schema = processor.output_schema(context_for(job))
    if processor.reduces:
        return schema
    return schema.insert(0, pa.field(RECORD_COLUMN, pa.int64(), nullable=False))


class ScratchFile(File):
    """A finished file in scratch space (settings.FILE_UPLOAD_TEMP_DIR): a storage on the same disk
    moves it into place rather than copy it, as it does an upload."""

    def temporary_file_path(self) -> str:
        return self.file.name
