"""Assemble a job's output from its finished shards, off the GPUs, streaming one row group at a time.

The output folder holds output.parquet (the processed records in input order, each with its input
position), rejects.csv (each rejected record with its position, line and reason) and manifest.json.
"""

import csv
import hashlib
import io
import json
import logging
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from jobs import lifecycle, processors
from jobs.billing_port import billing
from jobs.models import OUTPUT_FILES, Job, Shard, State
from jobs.outputs import ScratchFile, context_for, output_schema
from jobs.outputs.stitch import StitchError, stitch
from jobs.retention import purge_staged_copy_if_due
from jobs.scheduling import sizing
from jobs.staging.shards import read_shard
from portal.text import csv_cell

log = logging.getLogger(__name__)


def _digest(path: str) -> dict:
    sha256 = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1024 * 1024):
            sha256.update(block)
    return {"bytes": os.path.getsize(path), "sha256": sha256.hexdigest()}


def _read_parts(shards: list[Shard]) -> Iterator[pa.Table]:
    """The done shards' parts, one row group at a time, in input order."""
    for shard in shards:
        with default_storage.open(shard.output_path, "rb") as part:
            parquet = pq.ParquetFile(part)
            for group in range(parquet.num_row_groups):
                yield parquet.read_row_group(group)


def _write_output(job: Job, shards: list[Shard], schema: pa.Schema, output: str) -> dict | None:
    """The done shards' parts in input order, stitched without decoding them (a reducing processor's
    merged); the output's size and SHA-256 when taken as it was written."""
    processor = processors.get(job.work)
    if processor.reduces:
        pq.write_table(processor.merge(_read_parts(shards), context_for(job)), output)
        return None
    if not shards:
        pq.write_table(schema.empty_table(), output)
        return None
    try:
        with open(output, "wb") as handle:
            return stitch(_opened(shards), handle)
    except StitchError as error:
        # Parts a slot of another version wrote (another pyarrow, page indexes): decoded and encoded again.
        log.warning("job %s: its parts are encoded again, they cannot be stitched: %s", job.pk, error)
        with pq.ParquetWriter(output, schema) as writer:
            for group in _read_parts(shards):
                writer.write_table(group.cast(schema))
        return None


def _opened(shards: list[Shard]) -> Iterator[File]:
    """Each done shard's part, open while it is stitched."""
    for shard in shards:
        with default_storage.open(shard.output_path, "rb") as part:
            yield part


def _guarded(rows: Iterable[tuple]) -> Iterator[tuple]:
    """Rejects as rows of rejects.csv, their reason and raw text guarded against a spreadsheet's formulas."""
    for position, line, reason, text in rows:
        yield position, line, csv_cell(reason), csv_cell(text)


def _write_rejects(job: Job, shards: list[Shard], failed: list[Shard], rejects: str) -> None:
    """Each done shard's rejects, and every record of a failed shard (partial output) as a reject."""
    with open(rejects, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["record", "line", "reason", "raw"])
        for shard in sorted([*shards, *failed], key=lambda shard: shard.index):
            if shard.status == Shard.Status.FAILED:
                reason = f"shard {shard.index} failed {shard.attempts} times: {shard.last_error}"
                records, raw = read_shard(job, shard)
                out.writerows(
                    (record.position, record.line, csv_cell(reason), csv_cell(raw(record))) for record in records
                )
                continue
            with default_storage.open(shard.rejects_path, "rb") as part:
                for batch in pq.ParquetFile(part).iter_batches():
                    rows = zip(*(batch.column(i).to_pylist() for i in range(4)), strict=True)
                    out.writerows(
                        (position, line, csv_cell(reason), csv_cell(text)) for position, line, reason, text in rows
                    )


def _staging(job: Job) -> dict:
    # The first of each: a later one is an attempt taking staging over, a hold's note, or a requeue.
    events = {}
    for event in job.events.filter(state__in=(State.STAGING, State.QUEUED)).order_by("at", "pk"):
        events.setdefault(event.state, event.at)
    seconds = job.staging_seconds or 0
    return {
        "started": events[State.STAGING].isoformat() if State.STAGING in events else None,
        "finished": events[State.QUEUED].isoformat() if State.QUEUED in events else None,
        "seconds": round(seconds, 3),
        "mb_per_s": round(job.staging_mb_per_s, 2) if seconds else None,
    }


def _model(job: Job) -> dict:
    """The model the work ran: where it came from and the file stored for it, as checked on submit."""
    found = {"name": job.model_name, "source": job.model_source or None, "sha256": job.model_sha256 or None}
    checked = job.plan.get("model", {})  # a Hugging Face folder's, as staging checked it again
    if "bytes" in checked:
        found["folder"] = {"bytes": checked["bytes"], "files": checked["files"]}
    return found


def covered(job: Job) -> int:
    """The records the job's output accounts for: all of them, or for a sample those of the shards
    it ran before its time was up, or for a pass whose staging broke while it streamed (it never knew
    all of them) those of the shards staged."""
    if job.kind == Job.Kind.PASS and job.records_total is not None:
        return job.records_total
    shards = job.shards.exclude(status=Shard.Status.SKIPPED)
    return shards.aggregate(records=Sum("record_count"))["records"] or 0


def manifest(
    job: Job, shards: list[Shard], complete: bool, files: dict, failed: list[Shard] = (), sample: dict | None = None
) -> dict:
    processor = processors.get(job.work)
    left_out = sum(shard.record_count for shard in failed)
    records_in = covered(job)
    found = {
        "job": job.pk,
        "kind": job.kind,
        "organisation": job.organisation.slug,
        "state": State.SUCCEEDED.value if complete else job.state,
        "complete": complete,
        "work": {"kind": job.work, "version": processor.version, "params": job.params, "plan": job.plan},
        "input": {
            "source": job.source_kind,
            "location": job.source_location or None,
            "name": job.source_name,
            "bytes": job.input_bytes,
            "compression": job.input_compression or None,
            "sent_bytes": job.sent_bytes,
            "sha256": job.input_sha256,
            "parts": job.parts_shown,
            "format": job.input_format,
            "columns": job.layout.get("columns", []),
            "records": job.records_total,
        },
        "staging": _staging(job),
        "request": {"gpus": job.gpus, "hours": str(job.hours), "shape": job.shape},
        "records": {
            "in": records_in,
            "out": sum(shard.records_out for shard in shards),
            "rejected": sum(shard.records_rejected for shard in shards) + left_out,
            "in_failed_shards": left_out,
            "not_processed": records_in - sum(s.records_out + s.records_rejected for s in shards) - left_out,
        },
        "failed_shards": [
            {
                "index": shard.index,
                "first_record": shard.first_record,
                "records": shard.record_count,
                "attempts": shard.attempts,
                "error": shard.last_error,
            }
            for shard in failed
        ],
        "shards": [
            {
                "index": shard.index,
                "first_record": shard.first_record,
                "records": shard.record_count,
                "bytes": shard.end_byte - shard.start_byte,
                "out": shard.records_out,
                "rejected": shard.records_rejected,
                "attempts": shard.attempts,
                "slot": str(shard.gpu) if shard.gpu else None,
            }
            for shard in shards
        ],
        "files": files,
        # What the job was billed, as the ledger holds it (each entry with its hash in the chain): its staging
        # and every hold, released before the output is assembled.
        "ledger": billing().ledger_lines(job),
        # The organisation's whole ledger as it then stood, sealed: the partner's proof of how far it went.
        "ledger_head": billing().ledger_head(job.organisation),
        "assembled_at": timezone.now().isoformat(),
    }
    if job.model_path:
        found["model"] = _model(job)
    if job.sample_id:
        found["sized_by_sample"] = job.sample_id
    if sample is not None:
        found["sample"] = sample
    return found


def assemble(job_id: int) -> bool:
    """Write the job's output; a finishing job then succeeds. Safe to run twice: the first one counts."""
    job = Job.objects.select_related("organisation").get(pk=job_id)
    if job.output_path or job.state not in (State.FINISHING, State.FAILED, State.CANCELLED, State.TIMED_OUT):
        return False
    shards = list(job.shards.filter(status=Shard.Status.DONE).select_related("gpu__node").order_by("index"))
    complete = job.state == State.FINISHING
    failed = list(job.shards.filter(status=Shard.Status.FAILED).order_by("index")) if complete else []
    left_out = sum(shard.record_count for shard in failed)
    accounted = sum(shard.records_out + shard.records_rejected for shard in shards) + left_out
    expected = covered(job)
    if complete and accounted != expected:
        lifecycle.fail(job, f"Output check failed: {accounted} of {expected} records accounted for.")
        return False
    sample = {**job.sample_result, **sizing.measure(job)} if job.kind == Job.Kind.SAMPLE and complete else None
    if not shards and not failed:
        return False
    prefix = f"{job.storage_prefix}/output-{uuid.uuid4().hex[:8]}"
    processor = processors.get(job.work)
    with tempfile.TemporaryDirectory(prefix="e31-output-", dir=settings.FILE_UPLOAD_TEMP_DIR) as scratch:
        paths = {name: os.path.join(scratch, name) for name in OUTPUT_FILES}
        stitched = _write_output(job, shards, output_schema(job), paths["output.parquet"])
        _write_rejects(job, shards, failed, paths["rejects.csv"])
        extra = processor.finish_output(paths["output.parquet"], scratch)
        paths.update((os.path.basename(path), path) for path in extra)
        known = {"output.parquet": stitched} if stitched and not processor.rewrites_output else {}
        files = {name: known.get(name) or _digest(path) for name, path in paths.items() if name != "manifest.json"}
        with open(paths["manifest.json"], "w", encoding="utf-8") as handle:
            json.dump(manifest(job, shards, complete, files, failed, sample), handle, indent=2)
        for name, path in paths.items():
            with open(path, "rb") as handle:
                default_storage.save(f"{prefix}/{name}", ScratchFile(handle))
    out = sum(shard.records_out for shard in shards)
    rejected = sum(shard.records_rejected for shard in shards) + left_out
    left = f"; {len(failed)} failed shard{'s' if len(failed) != 1 else ''} left out" if failed else ""
    with transaction.atomic():
        won = Job.objects.filter(pk=job.pk, output_path="").update(
            output_path=prefix,
            output_files=list(paths),
            records_out=out,
            records_rejected=rejected,
            sample_result=sample if sample is not None else job.sample_result,
        )
        if won and complete:
            lifecycle.succeed(job, f"{out:,} records out, {rejected:,} rejected{left}")
    if not won:
        _delete_folder(prefix)
        return False
    for shard in shards:
        default_storage.delete(shard.output_path)
        default_storage.delete(shard.rejects_path)
    _delete_unfinished_outputs(job, prefix)
    purge_staged_copy_if_due(job.pk)
    return True


def _delete_unfinished_outputs(job: Job, kept: str) -> None:
    """The files an assembly left behind when it was stopped before it could finish (its worker
    killed): another attempt's output is never the job's, so nothing reads them."""
    try:
        folders, _ = default_storage.listdir(job.storage_prefix)
    except FileNotFoundError:  # a storage with folders, none left for the job
        return
    for folder in folders:
        if folder.startswith("output-") and f"{job.storage_prefix}/{folder}" != kept:
            _delete_folder(f"{job.storage_prefix}/{folder}")


def _delete_folder(prefix: str) -> None:
    _, names = default_storage.listdir(prefix)
    for name in names:
        default_storage.delete(f"{prefix}/{name}")
    default_storage.delete(prefix)  # the folder itself where the storage has folders (a no-op on S3)


def open_output_file(job: Job, name: str) -> io.BufferedReader:
    return default_storage.open(f"{job.output_path}/{name}", "rb")


def signed_output_url(job: Job, name: str, filename: str) -> str | None:
    """A signed URL that downloads an output file straight from storage for E31_OUTPUT_URL_SECONDS,
    where the storage makes such URLs (S3); None where it keeps files on this disk."""
    path = f"{job.output_path}/{name}"
    try:
        default_storage.path(path)
    except NotImplementedError:
        disposition = f'attachment; filename="{filename}"'
        return default_storage.url(
            path, parameters={"ResponseContentDisposition": disposition}, expire=settings.E31_OUTPUT_URL_SECONDS
        )
    return None
