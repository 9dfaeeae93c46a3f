"""The `e31` command: log in, submit a dataset (uploaded with resume) and follow it to its output and
its bill, and look after the organisation's jobs.

Results go to stdout, progress to stderr (bars on a terminal, a line per state change otherwise).
Exit 0 on success, 1 on a failure or a job that did not succeed, 2 on a usage error, 130 on Ctrl-C;
each failure is one line on stderr, `e31: ` and the reason (the portal's own sentence when it refused; a
line for each value when it refused several). `submit` asks the portal's dry run of the job before it
uploads anything, so a job the portal would refuse costs no upload: the client keeps no copy of its checks.
"""

import argparse
import getpass
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, NoReturn, TextIO

import httpx
from tqdm import tqdm

from e31 import config, pack
from e31.client import VERSION, Client, job_spec, new_key, request_spec
from e31.download import DownloadError, download_file
from e31.errors import APIError, error_lines
from e31.schema import ENDED, Job
from e31.upload import CHUNK_SIZE, ResumeStore, Uploaded, resume_key, upload_file

INTERRUPTED = 130
SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
# The credentials' options (--s3-key-id …) and the variables each falls back on. The endpoint is the
# portal's to choose (it fetches only from the S3 its operators set), so none is sent.
S3_ENV = {
    "key_id": ("AWS_ACCESS_KEY_ID",),
    "secret": ("AWS_SECRET_ACCESS_KEY",),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "session_token": ("AWS_SESSION_TOKEN",),
}


class Failure(Exception):
    """A reason to stop, said in one line."""


class Interrupted(Exception):
    """Ctrl-C, with what it left behind."""


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error said in one line like every other failure."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"e31: {message} (see {self.prog} --help)\n")


# Reading the options.


def parse_size(text: str) -> int:
    """A chunk size: bytes, or with K, M or G (binary units): 8M, 512K, 1048576."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in "KMG" else ""
    number = value.removesuffix(unit) if unit else value
    if not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"a size such as 8M, 512K or 1048576, not {text!r}")
    return int(number) * SIZE_UNITS[unit]


def parse_param(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"name=value, not {text!r}")
    return name.strip(), value


def parse_month(text: str) -> str:
    year, sep, month = text.partition("-")
    if not (sep and len(year) == 4 and year.isdigit() and month.isdigit() and 1 <= int(month) <= 12):
        raise argparse.ArgumentTypeError(f"a month as YYYY-MM, not {text!r}")
    return f"{year}-{int(month):02d}"


def s3_credentials(args: argparse.Namespace, env: dict[str, str], prefix: str = "s3") -> dict[str, str] | None:
    """The credentials for an s3:// location: the options, else the AWS_* variables; None when neither
    gives a key. With prefix "model_s3", the model's own (--model-s3-key-id …), from the options only."""
    found = {
        name: getattr(args, f"{prefix}_{name}") or next((env[var] for var in names if env.get(var)), "")
        for name, names in S3_ENV.items()
    }
    if not found["key_id"] and not found["secret"]:
        return None
    if not found["key_id"] or not found["secret"]:
        option = f"--{prefix.replace('_', '-')}"
        variables = " (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)" if prefix == "s3" else ""
        raise Failure(f"Give both {option}-key-id and {option}-secret{variables}.")
    return {
        "access_key_id": found["key_id"],
        "secret_access_key": found["secret"],
        "region": found["region"],
        "session_token": found["session_token"],
    }


# Showing progress and results.


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def size_text(count: int | None) -> str:
    if count is None:
        return "?"
    value = float(count)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1000
    return f"{value:,.1f} TB"


def hundredths(value: object) -> str:
    """A figure as the portal's pages write it: to the hundredth, thousands separated (1,234.56); under a
    hundredth, not 0: < 0.01. What is no number is shown as it came."""
    try:
        figure = Decimal(str(value))
    except ArithmeticError:
        return str(value)
    if not figure.is_finite():
        return str(value)
    if figure and abs(figure) < Decimal("0.01"):
        return "< 0.01" if figure > 0 else "> -0.01"
    return f"{figure.quantize(Decimal('0.01'), ROUND_HALF_UP):,}"


def money(amount: object, currency: object = "") -> str:
    """1,234.56 USD, as the pages write an amount."""
    return f"{hundredths(amount)} {currency or ''}".rstrip()


class Bar:
    """A tqdm bar on stderr when it is a terminal; nothing otherwise. It starts at the first figure shown,
    so a resumed upload or a job watched half-way does not count what was done before as speed."""

    def __init__(self, desc: str, total: int | None, unit: str = "B", fmt: str | None = None):
        self.desc, self.total, self.unit, self.fmt = desc, total, unit, fmt
        self.bar: tqdm | None = None

    def show(self, done: int, total: int | None = None, note: str = "") -> None:
        if not sys.stderr.isatty():
            return
        if self.bar is None:
            scaled = self.unit == "B"
            self.bar = tqdm(
                total=total or self.total,
                initial=done,
                desc=self.desc,
                unit=self.unit,
                unit_scale=scaled,
                unit_divisor=1024 if scaled else 1000,
                file=sys.stderr,
                dynamic_ncols=True,
                bar_format=self.fmt,
            )
        if total is not None and total != self.bar.total:
            self.bar.total = total
        if note:
            self.bar.set_postfix_str(note, refresh=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class JobDisplay:
    """A job followed: bars for staging and for the pass on a terminal, a line per state otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.state = ""
        self.phase = ""
        self.bar: Bar | None = None
        self.told_at_risk = False

    def update(self, job: Job) -> None:
        state = job["state"]
        if state != self.state:
            self.state = state
            if not self.tty or state in ENDED:
                self.close()
                say(f"Job {job['id']}: {state_text(job)}")
        if (at_risk := job.get("deadline_at_risk")) and not self.told_at_risk:
            self.told_at_risk = True
            say(f"Job {job['id']}: {at_risk['message']}")  # once, as the portal tells it once
        if self.tty:
            self._show(job)

    def _show(self, job: Job) -> None:
        progress = job.get("progress") or {}
        phase = {"submitted": "staging", "staging": "staging", "queued": "queued", "running": "pass"}.get(
            job["state"], "pass" if job["state"] == "finishing" else ""
        )
        if phase != self.phase:
            self.close()
            self.phase = phase
            if phase == "staging":
                self.bar = Bar("staging", 100, unit="%")
            elif phase == "queued":
                self.bar = Bar("queued", None, unit="", fmt="{desc} {elapsed}{postfix}")
            elif phase == "pass":
                self.bar = Bar("pass", progress.get("records_total") or None, unit=" rec")
        if self.bar is None:
            return
        if phase == "staging":
            self.bar.show(progress.get("staging_percent") or 0)
        elif phase == "queued":
            self.bar.show(0, note=queue_text(job))
        else:
            staged = f"{staged_so_far(progress)} of the data staged" if progress.get("streaming") else ""
            self.bar.show(progress.get("records_done") or 0, progress.get("records_total") or None, note=staged)

    def close(self) -> None:
        if self.bar:
            self.bar.close()
            self.bar = None
        self.phase = ""


def state_text(job: Job) -> str:
    text = str(job.get("state_display") or job["state"]).lower()
    if job.get("on_hold"):
        reason = job.get("on_hold_reason")
        text += f" (on hold by the operators{': ' + reason if reason else ''})"
    if job["state"] == "queued" and queue_text(job):
        text += f" ({queue_text(job)})"
    return text


def staged_so_far(progress: dict) -> str:
    """How much of a job's data is staged: a percent where its size is known, else its megabytes so far."""
    if progress.get("staging_percent") is not None:
        return f"{progress['staging_percent']} %"
    return f"{(progress.get('staged_bytes') or 0) / 1e6:,.1f} MB"


def queue_text(job: Job) -> str:
    queue = job.get("queue")
    if not isinstance(queue, dict):
        return ""
    parts = []
    if queue.get("place"):
        parts.append(f"place {queue['place']}")
    if queue.get("latest_start"):
        parts.append(f"starts by {moment_text(queue['latest_start'])}")
    return ", ".join(parts)


def moment_text(value: str, seconds: bool = False) -> str:
    """An ISO 8601 time from the portal as a person reads it, to the minute (or second), in UTC."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S}" if seconds else f"{moment:%Y-%m-%d %H:%M} UTC"


def receipt_entries(receipt: dict[str, Any]) -> list[dict[str, Any]]:
    entries = receipt.get("entries", receipt.get("ledger", []))
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []


def receipt_totals(receipt: dict[str, Any]) -> list[tuple[str, str]]:
    """(currency, amount) of each total, whether the receipt gives them as a list or by currency."""
    totals = receipt.get("totals", receipt.get("total", []))
    if isinstance(totals, dict):
        if "currency" in totals:
            return [(str(totals["currency"]), str(totals.get("amount", "")))]
        return [(str(currency), str(amount)) for currency, amount in totals.items()]
    if isinstance(totals, list):
        return [
            (str(item.get("currency", "")), str(item.get("amount", ""))) for item in totals if isinstance(item, dict)
        ]
    return []


def ledger_line(entry: dict[str, Any]) -> str:
    """A ledger entry as one line: what was held, for how long, at what rate, for how much; an entry
    that held no GPU (staging) says what it moved."""
    what = f"job {entry.get('job')} {entry.get('kind', '')}".strip()
    amount = money(entry.get("amount"), entry.get("currency"))
    if entry.get("gpus"):
        held = f"{entry['gpus']} × {entry.get('seconds')} s"
        rate = f"{money(entry.get('rate'), entry.get('currency'))} per GPU-hour"
        line = f"{what}: {held} = {hundredths(entry.get('gpu_hours'))} GPU-hours at {rate} = {amount}"
    else:
        line = f"{what}: {size_text(entry.get('bytes'))} in {entry.get('seconds')} s = {amount}"
    if entry.get("reason"):
        line += f" ({entry['reason']})"
    return line


def print_receipt(portal: Client, job_id: int) -> None:
    receipt = portal.receipt(job_id)
    entries = receipt_entries(receipt)
    if not entries:
        print(f"Nothing was charged for job {job_id}: it ended before its data was staged or anything was held.")
    for entry in entries:
        print(ledger_line(entry))
    for currency, amount in receipt_totals(receipt):
        print(f"Total: {money(amount, currency)}")


def request_text(request: dict) -> str:
    """A request as the job page says it: GPUs × hours, its shape, and whether it is fixed or flexible."""
    text = f"{request.get('gpus')} × {request.get('hours')} h, {request.get('shape')}"
    if request.get("kind") == "flexible":
        text += f", flexible up to {request.get('max_gpus')} at once"
    elif request.get("kind"):
        text += ", fixed"
    return text + (f", deadline {request['deadline']}" if request.get("deadline") else "")


def outlook_text(job: Job) -> str:
    """When the job is expected to start and finish, and whether that meets its deadline."""
    text = f"to finish by {job['expected_finish']}"
    if job.get("expected_start") and not job.get("started_at"):
        text = f"to start by {job['expected_start']} and {text}"
    if job.get("deadline_feasible") is False:
        text += " (its deadline could not be promised at submit: it runs as best effort)"
    return text


def job_summary(job: Job) -> list[str]:
    data, request = job.get("data") or {}, job.get("request") or {}
    progress, meter = job.get("progress") or {}, job.get("meter") or {}
    sample = " (sample)" if job.get("kind") == "sample" else ""
    lines = [
        f"Job {job['id']}{sample}: {state_text(job)}",
        f"  work     {job.get('work')} {json.dumps(job.get('params') or {})}",
        f"  data     {data.get('name') or data.get('location')} ({size_text(data.get('bytes'))}, "
        f"{data.get('format') or 'format not known yet'})",
        f"  request  {request_text(request)}",
    ]
    if job.get("expected_finish") and not job.get("ended_at"):
        lines.append(f"  expected {outlook_text(job)}")
    if (at_risk := job.get("deadline_at_risk")) and not job.get("ended_at"):
        lines.append(f"  deadline {at_risk['message']}")
    if progress.get("records_total"):
        rate = progress.get("records_per_second")
        lines.append(
            f"  progress {progress.get('percent', 0)} % · {progress.get('records_done', 0):,} of "
            f"{progress['records_total']:,} records" + (f" · {rate:,.0f} rec/s" if rate else "")
        )
    if meter.get("gpu_hours"):
        held = f"{hundredths(meter['gpu_hours'])} GPU-hours"
        lines.append(f"  meter    {held}, {money(meter.get('amount'), meter.get('currency'))}")
    files = (job.get("output") or {}).get("files") or []
    if files:
        lines.append("  output   " + ", ".join(file["name"] for file in files))
    if job.get("error"):
        lines.append(f"  error    {job['error']}")
    return lines


def print_table(rows: list[tuple[str, ...]]) -> None:
    """Rows of text in columns as wide as their widest cell, the first row the heading."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def measured_text(answer: dict[str, Any]) -> str:
    """What a sample measured, in a sentence as the job's page says it."""
    measured = answer["measured"]
    on = f" on {measured['slot']}" if measured.get("slot") else ""
    text = (
        f"Sample {answer['job']} ran over {measured['records']:,} of {measured['records_total']:,} records{on} in "
        f"{measured['seconds']:,.1f} s: {measured['records_per_second']:,.1f} records per second per slot"
    )
    if measured.get("tokens_per_second"):
        text += f" ({measured['tokens_per_second']:,.1f} tokens generated per second)"
    if (measured.get("startup_seconds") or 0) >= 0.1:
        text += f", after {measured['startup_seconds']:,.1f} s to start"
    if measured.get("peak_memory_mb"):
        text += f"; peak memory {measured['peak_memory_mb']:,} MB"
    return text + "."


def estimate_row(label: str, estimate: dict[str, Any]) -> tuple[str, ...]:
    """One pass of an estimate as a row: its GPUs, expected time, GPU-hours and cost, and the hours to ask for."""
    cost = "no rate set" if estimate["cost"] is None else money(estimate["cost"], estimate["currency"])
    hours = f"{estimate['hours']} h"
    return (label, str(estimate["gpus"]), estimate["duration"], hundredths(estimate["gpu_hours"]), cost, hours)


# What several commands share.


def connect(env: dict[str, str] | None = None) -> Client:
    try:
        found = config.load(os.environ if env is None else env)
    except config.ConfigError as error:
        raise Failure(str(error)) from None
    return Client(found.url, found.token)


def upload_with_bar(portal: Client, path: Path, chunk_size: int, store: ResumeStore) -> Uploaded:
    bar = Bar(f"upload {path.name}", path.stat().st_size)
    state = {"offset": 0, "size": path.stat().st_size, "started": False}

    def progress(offset: int, size: int) -> None:
        if not state["started"] and offset == size:
            say(f"Using the earlier upload of {path.name}: the portal has all its {size:,} bytes.")
        elif not state["started"] and offset:
            say(f"Resuming the upload of {path.name} at byte {offset:,} of {size:,}.")
        state.update(offset=offset, started=True)
        bar.show(offset, size)

    try:
        return upload_file(portal, path, chunk_size=chunk_size, store=store, progress=progress, forget_when_done=False)
    except KeyboardInterrupt:
        raise Interrupted(
            f"Upload stopped at byte {state['offset']:,} of {state['size']:,}; run the same command to resume it."
        ) from None
    finally:
        bar.close()


def safe_name(name: str) -> str:
    """An output file's name, as a plain file name in the folder (never a path out of it)."""
    if not name or name in (".", "..") or Path(name).name != name or "\\" in name:
        raise Failure(f"The portal named an output file {name!r}; refusing to write it.")
    return name


def download_outputs(portal: Client, job: Job, folder: Path) -> list[Path]:
    files = (job.get("output") or {}).get("files") or []
    if not files:
        raise Failure(f"Job {job['id']} has no output (it is {state_text(job)}).")
    try:
        manifest = portal.manifest(job["id"])
    except APIError as error:
        if error.status != 404:
            raise
        manifest = {}
    digests = manifest.get("files") or {}
    written = []
    for file in files:
        name = safe_name(file["name"])
        bar = Bar(name, None)
        try:
            written.append(
                download_file(
                    portal,
                    portal.absolute(file["url"]),
                    folder / name,
                    expected=digests.get(name),
                    progress=lambda done, total, bar=bar: bar.show(done, total),
                )
            )
        except KeyboardInterrupt:
            raise Interrupted(f"Download stopped; run e31 download {job['id']} to resume it.") from None
        finally:
            bar.close()
    return written


def follow(portal: Client, job_id: int, folder: Path | None) -> int:
    """Watch the job to its end; on success write its output (with `folder`) and print its bill."""
    display = JobDisplay()
    try:
        job = portal.wait(job_id, display.update)
    except KeyboardInterrupt:
        raise Interrupted(f"Stopped watching; job {job_id} goes on (e31 watch {job_id}).") from None
    finally:
        display.close()
    if job["state"] != "succeeded":
        raise Failure(f"Job {job_id} {state_text(job)}: {job.get('error') or 'no output'}")
    if folder is not None:
        written = download_outputs(portal, job, folder)
        say(f"Output written to {folder}/ ({', '.join(path.name for path in written)})")
    print_receipt(portal, job_id)
    if job.get("kind") == "sample":
        say(sample_hint(job))
    return 0


def model_file(given: str) -> Path:
    """The model file to upload: the file given, or the folder given packed into a .tar."""
    path = Path(given)
    if path.is_file():
        return path
    if not path.is_dir():
        raise Failure(f"There is no model file or folder {given} (a model is a file, a folder, a URL or s3://).")
    say(f"Packing the model folder {path} into a .tar to upload.")
    try:
        return pack.pack(path)
    except pack.PackError as error:
        raise Failure(str(error)) from None
    except OSError as error:
        raise Failure(f"The model folder {path} could not be packed: {error}.") from None


# The commands.


def cmd_login(args: argparse.Namespace) -> int:
    stored = config.read_file()
    url = args.url or input(f"Portal URL [{stored.get('url', 'https://')}]: ").strip() or stored.get("url", "")
    if sys.stdin.isatty():
        token = getpass.getpass("API token (from the portal's API tokens page): ")
    else:
        token = sys.stdin.readline()
    token = token.strip()
    if not url or not token:
        raise Failure("Give the portal's URL and an API token.")
    try:
        url = config.normalise_url(url)
    except config.ConfigError as error:
        raise Failure(str(error)) from None
    with Client(url, token) as portal:
        me = portal.me()
    path = config.save(url, token)
    who = me.get("username") or me.get("email") or "you"
    organisation = me.get("organisation")
    if isinstance(organisation, dict):
        organisation = organisation.get("name") or organisation.get("slug")
    print(f"Logged in to {url} as {who}" + (f" ({organisation})" if organisation else "") + f"; token in {path}.")
    return 0


def check_first(portal: Client, spec: dict[str, Any], to_upload: set[str]) -> Job | None:
    """The portal's dry run of the job, before any byte is uploaded: what the portal would refuse, said in its
    words and all at once (APIError), but for the parts still to upload (`data`, `work.model_upload`), whose
    absence it also names. A portal from before dry runs makes a job it finds whole (nothing to upload): that
    job is returned."""
    try:
        checked = portal.check_job(spec)
    except APIError as error:
        left = [(field, message) for field, message in error.errors if field not in to_upload]
        if error.status != 400 or len(left) == len(error.errors):
            raise
        if left:
            raise APIError(error.status, error.code, left[0][1], left[0][0], left) from None
        return None
    return None if checked.get("dry_run") else checked


def submit_spec(args: argparse.Namespace, location: str, credentials: dict | None, model: dict) -> dict[str, Any]:
    """The job the options ask for, its data and model as given (`model`: job_spec's model_* arguments); the
    uploads' ids are added once they are made."""
    return job_spec(
        work=args.work,
        params=dict(args.param),
        location=location,
        s3_credentials=credentials,
        sha256=args.sha256,
        gpus=args.gpus,
        hours=args.hours,
        shape=args.shape,
        deadline=args.deadline,
        allow_partial=args.allow_partial,
        kind=args.request,
        max_gpus=args.max_gpus,
        staged_days=args.keep_days,
        output_days=args.keep_output_days,
        sample=args.sample,
        webhook_url=args.webhook_url,
        **model,
    )


def without_uploads(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "data": {**spec["data"], "upload": None}, "work": {**spec["work"], "model_upload": None}}


def made_before(portal: Client, store: ResumeStore, data_key: str, spec: dict[str, Any]) -> Job | None:
    """The job an earlier run of this command made of this file, which broke before it said so: the request that
    run sent, sent again with the Idempotency-Key it kept beside its upload's resume state, answered by the
    portal with that job. None when no run left one, or it asked for something else."""
    earlier = store.state(data_key).get("job")
    if not isinstance(earlier, dict) or not isinstance(earlier.get("spec"), dict):
        return None
    if without_uploads(earlier["spec"]) != without_uploads(spec):
        return None
    try:
        return portal.create_job(earlier["spec"], str(earlier.get("key")))
    except APIError:
        return None  # its key has expired, or that run never made the job: this run makes it


def submitted(portal: Client, args: argparse.Namespace, spec: dict[str, Any], model_path: Path | None) -> Job:
    """The job, made once: its files uploaded (resumed where a run left them), then created under an
    Idempotency-Key kept with the data's resume state, so that a run after one that broke in between hears of
    the job that one made instead of making another."""
    store, location, path = ResumeStore(), spec["data"]["location"], Path(args.data)
    data_key = "" if location else resume_key(portal.url, path, path.stat().st_size, path.stat().st_mtime_ns)
    if data_key and (job := made_before(portal, store, data_key, spec)):
        store.forget(data_key)
        return job
    uploaded, model = None, None
    if not location:
        uploaded = upload_with_bar(portal, path, args.chunk_size, store)
        spec["data"]["upload"] = uploaded.upload_id
    if model_path:
        model = upload_with_bar(portal, model_path, args.chunk_size, store)
        spec["work"]["model_upload"] = model.upload_id
    key = new_key()
    if uploaded:
        store.note(uploaded.key, job={"key": key, "spec": spec})
    try:
        job = portal.create_job(spec, key)
    except APIError as error:
        if uploaded and (error.field or "").startswith("data"):
            store.forget(uploaded.key)  # the portal no longer takes that upload: the next run sends the file
        raise
    for done in (uploaded, model):
        if done:
            store.forget(done.key)  # a job's data now; the same file again is a new upload
    return job


def cmd_submit(args: argparse.Namespace) -> int:
    if args.output and not args.wait:
        raise Failure("-o needs --wait (or run e31 download later).")
    if args.model and args.model_from:
        raise Failure("Give the model one way: --model or --model-from.")
    location, credentials, model_credentials = "", None, None
    given = [*([args.data] if args.data else []), *args.more_data]
    if not given:
        raise Failure("Give the data: DATA, or --data once for each part of a dataset.")
    args.data = given[0]
    if len(given) > 1:  # the parts of one dataset: each a location, checked by the portal
        location = given
    elif "://" in args.data or args.on_server:
        location = args.data
    model_location = args.model if args.model and "://" in args.model else ""
    if model_location.startswith("s3://"):
        model_credentials = s3_credentials(args, {}, "model_s3")
    elif s3_credentials(args, {}, "model_s3"):
        raise Failure("The --model-s3-* credentials go with an s3:// --model only.")
    if args.data.startswith("s3://") or (model_location.startswith("s3://") and not model_credentials):
        credentials = s3_credentials(args, dict(os.environ))
    path = Path(args.data)
    if not location and not path.is_file():
        raise Failure(f"There is no file {args.data} (data is a file, an https:// URL or an s3:// location).")
    model_path = model_file(args.model) if args.model and not model_location else None
    given_model = {
        "model_location": model_location,
        "model_from_job": args.model_from,
        "model_s3_credentials": model_credentials,
    }
    spec = submit_spec(args, location, credentials, given_model)
    with connect() as portal:
        to_upload = {field for field, pending in (("data", not location), ("work.model_upload", model_path)) if pending}
        job = check_first(portal, spec, to_upload) or submitted(portal, args, spec, model_path)
        if model_path and Path(args.model).is_dir():
            pack.discard(model_path)
        request = job.get("request") or {}
        name = (job.get("data") or {}).get("name") or args.data
        hours = f"{Decimal(str(request.get('hours'))).normalize():f}"  # "1.00" from the portal reads 1
        say(f"Job {job['id']} submitted: {request.get('gpus')} × {hours} h of {job['work']} over {name}")
        if job.get("task_queue") == "unreachable":
            say("The portal's job queue is unreachable just now: the job is recorded, and staged once it is back.")
        if not args.wait:
            print(job["id"])
            return 0
        return follow(portal, job["id"], args.output)


def cmd_jobs(args: argparse.Namespace) -> int:
    filters = {"state": args.state, "kind": args.kind, "work": args.work}
    with connect() as portal:
        page = portal.list_jobs(page_size=args.limit, **filters)
    if args.json:
        print(json.dumps(page["results"], indent=2))
        return 0
    rows = [("ID", "STATE", "WORK", "DATA", "REQUEST", "CREATED")]
    for job in page["results"]:
        data, request = job.get("data") or {}, job.get("request") or {}
        rows.append(
            (
                str(job["id"]),
                state_text(job),
                str(job.get("work", "")) + (" (sample)" if job.get("kind") == "sample" else ""),
                str(data.get("name") or data.get("location") or ""),
                f"{request.get('gpus')} × {request.get('hours')} h",
                str(job.get("created", ""))[:16].replace("T", " "),
            )
        )
    print_table(rows)
    if page.get("count", 0) > len(page["results"]):
        say(f"{len(page['results'])} of {page['count']} jobs; --limit shows more.")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with connect() as portal:
        job = portal.job(args.id)
        events = portal.events(args.id) if args.events else []
    if args.json:
        print(json.dumps(job, indent=2))
        return 0
    print("\n".join(job_summary(job)))
    for event in events:
        print(f"  {moment_text(event['at'], seconds=True)}  {event['state']:<10} {event['message']}".rstrip())
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    with connect() as portal:
        return follow(portal, args.id, args.output)


def cmd_cancel(args: argparse.Namespace) -> int:
    with connect() as portal:
        job = portal.cancel(args.id)
    print(f"Job {job['id']}: {state_text(job)}")
    if job.get("task_queue") == "unreachable":
        say("The portal's job queue is unreachable just now; the cancel stands.")
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    folder = args.output or Path(f"job-{args.id}")
    with connect() as portal:
        for path in download_outputs(portal, portal.job(args.id), folder):
            print(path)
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    with connect() as portal:
        if args.csv or args.json:
            for block in portal.ledger_export("csv" if args.csv else "json", month=args.month, job=args.job):
                sys.stdout.buffer.write(block)
            sys.stdout.buffer.flush()
            return 0
        totals: dict[str, Decimal] = {}
        for entry in portal.ledger(month=args.month, job=args.job):
            print(ledger_line(entry))
            currency = str(entry.get("currency", ""))
            totals[currency] = totals.get(currency, Decimal(0)) + Decimal(str(entry.get("amount") or 0))
    for currency, amount in sorted(totals.items()):
        print(f"Total: {money(amount, currency)}")
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    with connect() as portal:
        answer = portal.estimate(args.id, args.gpus)
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    print(measured_text(answer))
    rows = [("PASS", "GPUS", "EXPECTED TIME", "GPU-HOURS", "EXPECTED COST", "ASK FOR")]
    rows += [estimate_row(shape["shape"], shape) for shape in answer["shapes"]]
    rows.append(estimate_row(f"--gpus {args.gpus}" if args.gpus else "as sampled", answer["estimate"]))
    print_table(rows)
    return 0


def cmd_pass(args: argparse.Namespace) -> int:
    if args.output and not args.wait:
        raise Failure("-o needs --wait (or run e31 download later).")
    retention = {"staged_days": args.keep_days, "output_days": args.keep_output_days}
    with connect() as portal:
        hours = args.hours
        if hours is None:  # the sample's estimate for these GPUs, with its margin, as the page's form fills in
            hours = portal.estimate(args.id, args.gpus)["estimate"]["hours"]
            say(f"The time limit is the sample's estimate for {args.gpus}: {hours} h.")
        request = request_spec(
            args.gpus, hours, args.shape, args.deadline, args.allow_partial, kind=args.request, max_gpus=args.max_gpus
        )
        job = portal.start_pass(args.id, request, retention)
        say(f"Job {job['id']} submitted: the full pass of sample {args.id}")
        if not args.wait:
            print(job["id"])
            return 0
        return follow(portal, job["id"], args.output)


def sample_hint(job: dict[str, Any]) -> str:
    """What to do after a finished sample: its full pass, or nothing when it ran over every record."""
    result = (job.get("sample") or {}).get("result") or {}
    total = result.get("records_total")
    if total and result.get("records", 0) >= total:
        return f"Sample {job['id']} ran over every record: its output is the whole result; no pass is needed."
    return f"Sample {job['id']} sized the full pass: e31 estimate {job['id']}, then e31 pass {job['id']} --gpus N."


def cmd_receipt(args: argparse.Namespace) -> int:
    with connect() as portal:
        print_receipt(portal, args.id)
    return 0


# The parser.


def add_request(parser: argparse.ArgumentParser, hours_required: bool = True) -> None:
    parser.add_argument("--gpus", required=True, help="GPUs held at once")
    parser.add_argument(
        "--hours",
        required=hours_required,
        help="the time limit, e.g. 4 or 1.5" + ("" if hours_required else " (default: the sample's estimate)"),
    )
    parser.add_argument("--shape", default="short-wide", help="short-wide (the default) or long-narrow")
    parser.add_argument("--deadline", metavar="ISO", help="done by then, e.g. 2026-12-01T18:00 (UTC unless it says)")
    parser.add_argument(
        "--request",
        default="",
        metavar="KIND",
        help="fixed (all the GPUs at once) or flexible (GPUs × hours as a budget, on as many as are free); "
        "default: flexible, fixed with a deadline",
    )
    parser.add_argument("--max-gpus", metavar="W", help="a flexible job's width cap (default: its GPUs)")
    parser.add_argument("--allow-partial", action="store_true", help="finish without a shard that keeps failing")
    parser.add_argument("--keep-days", default=0, metavar="N", help="keep the staged copy N days")
    parser.add_argument("--keep-output-days", metavar="N", help="keep the output N days after the end")


def add_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait", action="store_true", help="follow the job to its end, then print its bill")
    parser.add_argument("-o", "--output", type=Path, metavar="DIR", help="with --wait: write the output files here")


def build_parser() -> Parser:
    parser = Parser(prog="e31", description="Submit and follow GPU jobs on an E31 portal.")
    parser.add_argument("--version", action="version", version=f"e31 {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    login = commands.add_parser("login", help="store the portal's URL and your API token")
    login.add_argument("--url", help="the portal's URL (asked when not given)")
    login.set_defaults(run=cmd_login)

    submit = commands.add_parser("submit", help="submit a dataset pass as a job")
    submit.add_argument(
        "data", nargs="?", metavar="DATA", help="a local file (uploaded, resumably), an https:// URL or s3://"
    )
    submit.add_argument(
        "--data",
        dest="more_data",
        action="append",
        default=[],
        metavar="LOCATION",
        help="given more than once (or after DATA), the parts of one dataset, joined in that order: each an "
        "https:// URL, an s3:// object or, with --on-server, a server path",
    )
    submit.add_argument("--work", required=True, metavar="KIND", help="the work kind, e.g. clean-table")
    submit.add_argument("--param", type=parse_param, action="append", default=[], metavar="K=V")
    submit.add_argument(
        "--model",
        metavar="MODEL",
        help="the model the work runs: onnx-infer's .onnx file; for embed, classify and generate a Hugging Face "
        "model folder (packed and uploaded, resumably) or its .zip or .tar; or an https:// URL or s3:// location "
        "the portal fetches (an s3:// prefix ending in / is the folder)",
    )
    submit.add_argument("--model-from", type=int, metavar="JOB", help="the model of an earlier job, still kept")
    add_request(submit)
    submit.add_argument("--sample", action="store_true", help="run a sample that sizes the full pass")
    submit.add_argument("--sha256", default="", metavar="HEX", help="the data's SHA-256; staging checks it")
    submit.add_argument("--on-server", action="store_true", help="DATA is a path under the portal's staging root")
    submit.add_argument("--s3-key-id", help="for s3:// data or model (or AWS_ACCESS_KEY_ID)")
    submit.add_argument("--s3-secret", help="for s3:// data or model (or AWS_SECRET_ACCESS_KEY)")
    submit.add_argument("--s3-region", help="for s3:// data or model (or AWS_REGION)")
    submit.add_argument("--s3-session-token", help="for temporary credentials (or AWS_SESSION_TOKEN)")
    submit.add_argument("--model-s3-key-id", help="for an s3:// model in another account than the data's")
    submit.add_argument("--model-s3-secret", help="the model's own S3 secret, with --model-s3-key-id")
    submit.add_argument("--model-s3-region", help="the model's bucket's region")
    submit.add_argument("--model-s3-session-token", help="the model's temporary credentials' token")
    submit.add_argument("--webhook-url", default="", help="also POST this job's state changes here")
    submit.add_argument(
        "--chunk-size", type=parse_size, default=CHUNK_SIZE, metavar="SIZE", help=f"upload chunks ({CHUNK_SIZE >> 20}M)"
    )
    add_wait(submit)
    submit.set_defaults(run=cmd_submit)

    jobs = commands.add_parser("jobs", help="the organisation's jobs, newest first")
    jobs.add_argument("--state", help="only jobs in this state (running, succeeded, ...)")
    jobs.add_argument("--kind", choices=["pass", "sample"])
    jobs.add_argument("--work", metavar="KIND")
    jobs.add_argument("--limit", type=int, default=20, help="at most this many (100 at most)")
    jobs.add_argument("--json", action="store_true")
    jobs.set_defaults(run=cmd_jobs)

    status = commands.add_parser("status", help="one job's state and figures")
    status.add_argument("id", type=int)
    status.add_argument("--events", action="store_true", help="with its timeline")
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=cmd_status)

    watch = commands.add_parser("watch", help="follow a job to its end")
    watch.add_argument("id", type=int)
    watch.add_argument("-o", "--output", type=Path, metavar="DIR", help="then write the output files here")
    watch.set_defaults(run=cmd_watch)

    cancel = commands.add_parser("cancel", help="cancel a job")
    cancel.add_argument("id", type=int)
    cancel.set_defaults(run=cmd_cancel)

    download = commands.add_parser("download", help="write a job's output files (resuming a partial one)")
    download.add_argument("id", type=int)
    download.add_argument("-o", "--output", type=Path, metavar="DIR", help="the folder (job-ID by default)")
    download.set_defaults(run=cmd_download)

    ledger = commands.add_parser("ledger", help="the organisation's ledger entries")
    ledger.add_argument("--month", type=parse_month, metavar="YYYY-MM")
    ledger.add_argument("--job", type=int, metavar="ID")
    shown = ledger.add_mutually_exclusive_group()
    shown.add_argument("--csv", action="store_true", help="the CSV export, streamed to stdout")
    shown.add_argument("--json", action="store_true", help="the JSON export, streamed to stdout")
    ledger.set_defaults(run=cmd_ledger)

    estimate = commands.add_parser("estimate", help="a finished sample's estimate of the full pass")
    estimate.add_argument("id", type=int)
    estimate.add_argument("--gpus", type=int, help="the GPUs of the pass (the sample's request by default)")
    estimate.add_argument("--json", action="store_true", help="the portal's answer as it is")
    estimate.set_defaults(run=cmd_estimate)

    full_pass = commands.add_parser("pass", help="run the full pass a finished sample sized")
    full_pass.add_argument("id", type=int, help="the sample")
    add_request(full_pass, hours_required=False)
    add_wait(full_pass)
    full_pass.set_defaults(run=cmd_pass)

    receipt = commands.add_parser("receipt", help="an ended job's ledger entries and total")
    receipt.add_argument("id", type=int)
    receipt.set_defaults(run=cmd_receipt)
    return parser


def run(argv: Sequence[str] | None = None, stderr: TextIO | None = None) -> int:
    """The command's exit status; failures said on stderr in one line."""
    stderr = stderr or sys.stderr
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=stderr)
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.run
    try:
        return command(args)
    except Interrupted as stop:
        print(f"e31: {stop}", file=stderr)
        return INTERRUPTED
    except KeyboardInterrupt:
        print("e31: stopped.", file=stderr)
        return INTERRUPTED
    except BrokenPipeError:
        raise  # what reads the output has closed it: main ends quietly
    except (Failure, APIError, DownloadError, httpx.HTTPError, OSError) as error:
        print("\n".join(error_lines(error)), file=stderr)
        return 1


def main() -> NoReturn:
    try:
        status = run()
        sys.stdout.flush()
    except BrokenPipeError:
        # Piped into `head`: what was wanted was read; say nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    sys.exit(status)
