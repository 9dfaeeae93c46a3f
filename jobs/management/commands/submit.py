"""`manage.py submit`: the operators' tool on the server for a job on a partner's behalf, through the
same path as the browser form. `--as` names the partner it is submitted as (a member of `--org`):
the job's submitter, who gets its receipt and its end-of-job email. Partners on their own machines
use the `e31` client and the API instead.

Exit 0 when the job is accepted (or, with --wait, when it succeeds); otherwise a one-line reason
and a non-zero exit: a refused job gives every refusal, each on a line of its own, in the service's
words (the job form's and the API's). A job accepted while the job queue is unreachable is recorded, and says so:
it is staged once the queue is back, and --wait waits for that.
"""

import json
import shutil
import sys
import tarfile
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from jobs import enqueue, services
from jobs.billing_port import billing
from jobs.facts import JobFacts
from jobs.models import Job, State
from jobs.outputs.assemble import open_output_file
from jobs.scheduling import sizing
from jobs.spec import Data, JobSpec, NamedFile, Request, Retention, Work
from jobs.staging import sources
from portal import units
from portal.models import Organisation, organisation_for
from portal.text import clean_name


def submitter(given: str, organisation: Organisation):
    """The member of the organisation named by username or email; CommandError for anyone else."""
    User = get_user_model()
    name = clean_name(given)
    active = User.objects.filter(is_active=True)
    user = active.filter(username=name).first() or active.filter(email__iexact=name).first()
    if user is None:
        raise CommandError(f"There is no user {given!r}.")
    if organisation_for(user) != organisation:
        raise CommandError(
            f"{user.get_username()} is not a member of {organisation.slug}: submit --as one of its members."
        )
    return user


def parse_params(pairs: list[str]) -> dict[str, str]:
    """--param name=value pairs, cleaned as the job form cleans its fields."""
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not clean_name(name):
            raise CommandError(f"--param takes name=value, not {pair!r}")
        params[clean_name(name)] = clean_name(value)
    return params


def spec_of(opts: dict, organisation: Organisation, files: ExitStack) -> JobSpec:
    """The job the options ask for, its files opened on `files`; a pass from a sample takes only the
    request and the retention."""
    params = parse_params(opts["param"])
    given = opts["model"] or ""
    model = model_of(Path(given), files) if given and "://" not in given else None
    location = given if "://" in given else ""
    data = data_of(opts["data"], clean_name(opts["sha256"]), organisation, files)
    work = Work(opts["work"], params, model, model_location=location, model_from_job=opts["model_from"])
    return JobSpec(work, data, request_of(opts), retention_of(opts), opts["sample"])


def data_of(all_given: list[str], sha256: str, organisation: Organisation, files: ExitStack) -> Data:
    """A URL, or a file in the organisation's staging folder, is staged from where it is; any other
    file is uploaded. Several are the parts of one dataset, in the order given, each staged from where
    it is (a file is its path, which the service holds to the staging folder)."""
    if len(all_given) > 1:
        parts = (given if "://" in given else str(Path(given).resolve()) for given in all_given)
        return Data(locations=tuple(parts), sha256=sha256)
    (given,) = all_given
    path = Path(given)
    if "://" in given:
        return Data(location=given, sha256=sha256)
    if sources.within(path.resolve(), sources.organisation_roots(organisation.slug)):
        return Data(location=str(path.resolve()), sha256=sha256)
    return Data(file=open_file(path, "file", files), sha256=sha256)


def open_file(path: Path, what: str, files: ExitStack) -> NamedFile:
    if not path.is_file():
        raise CommandError(f"There is no {what} {path}.")
    return NamedFile(files.enter_context(path.open("rb")), path.name)


def model_of(path: Path, files: ExitStack) -> NamedFile:
    """The model file, or a model folder packed as a .tar, as embed, classify and generate take it."""
    if not path.is_dir():
        return open_file(path, "model file", files)
    packed = files.enter_context(tempfile.TemporaryFile(prefix="e31-model-"))  # noqa: SIM115 (closed by `files`)
    with tarfile.open(fileobj=packed, mode="w") as archive:
        archive.add(path, arcname=path.name)  # links are added as links, which the check refuses
    return NamedFile(packed, f"{path.name}.tar")


def outlook_line(job: Job) -> str:
    """What the queue now says of the job's end, and of its deadline: that it can meet it, or how late."""
    if job.expected_finish is None:
        return ""
    finish = f"{job.expected_finish:%Y-%m-%d %H:%M} UTC"
    if job.deadline is None:
        return f"Expected to finish by {finish}."
    deadline = f"{job.deadline:%Y-%m-%d %H:%M} UTC"
    if job.deadline_feasible:
        return f"Expected to finish by {finish}, before its deadline, {deadline}."
    if job.expected_finish <= job.deadline:
        return (
            f"Expected to finish by {finish}, too close to its deadline, {deadline}, to promise it. It runs as best "
            "effort; cancel it and widen it (--max-gpus), or drop the deadline."
        )
    return (
        f"It cannot finish before its deadline, {deadline}: the earliest is {finish}. It runs as best effort; "
        "cancel it and widen it (--max-gpus), or drop the deadline."
    )


def request_of(opts: dict) -> Request:
    return Request(
        opts["gpus"],
        opts["hours"],
        opts["shape"],
        deadline=opts["deadline"],
        allow_partial=opts["allow_partial"],
        kind=opts["request"],
        max_gpus=opts["max_gpus"],
    )


def retention_of(opts: dict) -> Retention:
    return Retention(opts["keep_days"], output_days=opts["keep_output_days"])


def progress_line(job: Job) -> str:
    facts = JobFacts(job)
    progress = facts.progress
    done = int(30 * progress.percent / 100)
    bar = "#" * done + "-" * (30 - done)
    rate = f" · {progress.records_per_second:,.0f} rec/s" if progress.records_per_second else ""
    # While staging streams into the pass the records are counted as they are staged.
    total = f"{job.staged_so_far} staged".replace("\xa0", " ")
    if progress.records_total is not None:
        total = f"{progress.records_total:,}"
    return (
        f"\r[{bar}] {progress.percent:3d}% {progress.records_done:,}/{total} records "
        f"· {job.get_state_display().lower()}{' (on hold by the operators)' if job.on_hold else ''}"
        f"{queue_place(facts)}{rate}   "
    )


def queue_place(facts: JobFacts) -> str:
    """A queued job's place, and when it starts at the latest, as the scheduler last stored them."""
    if facts.queue_position is None:
        return ""
    latest = f", starts by {facts.latest_start:%Y-%m-%d %H:%M} UTC at the latest" if facts.latest_start else ""
    return f", number {facts.queue_position} in the queue{latest}"


class Command(BaseCommand):
    help = "Submit a dataset pass as a job, optionally wait for it and fetch its output."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="The organisation's slug or name.")
        parser.add_argument(
            "--as",
            dest="as_user",
            required=True,
            metavar="USER",
            help="The member of --org (username or email) the job is submitted as: its submitter.",
        )
        parser.add_argument(
            "--data",
            action="append",
            help="A file to upload, an http(s) URL, an s3:// URI, or a path under a staging root. Given again, "
            "the parts of one dataset (locations only), joined in the order given.",
        )
        parser.add_argument("--work", help="The work kind, e.g. clean-table.")
        parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
        parser.add_argument(
            "--model",
            help=(
                "The model the work runs: onnx-infer's .onnx file; for embed, classify and generate a Hugging Face "
                "model folder, or its .zip or .tar. An http(s) URL or an s3:// location in the operator's buckets "
                "(an object, or a prefix ending in / holding the folder) is fetched by the portal."
            ),
        )
        parser.add_argument(
            "--model-from", type=int, metavar="JOB", help="The model of an earlier job of the organisation, still kept."
        )
        parser.add_argument("--gpus", required=True)
        parser.add_argument("--hours", help="The time limit; with --from-sample, the sample's estimate by default.")
        parser.add_argument(
            "--sample",
            action="store_true",
            help="Run a sample first: stage the data, run the work on one slot for about a minute, wait, and "
            "print the full pass's GPU-hours, time and cost for each shape (then use --from-sample).",
        )
        parser.add_argument(
            "--from-sample",
            type=int,
            metavar="JOB",
            help="Run the full pass a finished sample sized, on its staged copy (no --data or --work).",
        )
        parser.add_argument("--shape", default=Job.Shape.SHORT_WIDE, help="short-wide (the default) or long-narrow.")
        parser.add_argument(
            "--deadline",
            metavar="ISO",
            help="Done by then (ISO 8601; UTC unless it says otherwise): the hold ends at the deadline at the "
            "latest, and a job not started by then ends without holding anything.",
        )
        parser.add_argument(
            "--request",
            default="",
            help="fixed (all its GPUs at once) or flexible (GPUs × hours as a budget, on as many as are free, "
            "changed between shards); default: flexible, fixed with a deadline.",
        )
        parser.add_argument("--max-gpus", help="A flexible job's width cap (default: its GPUs).")
        parser.add_argument("--keep-days", default=0, help="Keep the staged copy this many days.")
        parser.add_argument(
            "--keep-output-days",
            help="Keep the output this many days after the job ends (default: the retention policy's, 30 unless set).",
        )
        parser.add_argument(
            "--allow-partial",
            action="store_true",
            help="Finish without a shard that keeps failing (its records rejected).",
        )
        parser.add_argument("--sha256", default="", help="The data's SHA-256; staging fails the job if it differs.")
        parser.add_argument("--wait", action="store_true", help="Wait for the job to end, showing progress.")
        parser.add_argument("--output", help="With --wait: write the output files into this folder.")

    def handle(self, *args, **opts):
        organisation = (
            Organisation.objects.filter(slug=opts["org"]).first()
            or Organisation.objects.filter(name=opts["org"]).first()
        )
        if organisation is None:
            raise CommandError(f"There is no organisation {opts['org']!r}.")
        user = submitter(opts["as_user"], organisation)
        opts["wait"] = opts["wait"] or opts["sample"]  # a sample is run for what it measures
        self.check_options(opts)
        try:
            with enqueue.unsent() as unsent:
                job = (
                    self.submit_pass(organisation, user, opts)
                    if opts["from_sample"]
                    else self.submit(organisation, user, opts)
                )
        except services.SubmitError as error:  # each refusal on its own line, in the service's words
            raise CommandError("\n".join(f"Refused: {refusal.message}" for refusal in error.refusals)) from None
        job.refresh_from_db()
        kind = f"flexible, up to {job.width_cap} at once" if job.flexible else "fixed"
        self.stderr.write(
            f"Job {job.pk} submitted: {job.gpus} × {float(job.hours):g} h ({kind}) of {job.work} over {job.source_name}"
        )
        if outlook := outlook_line(job):
            self.stderr.write(outlook)
        if unsent:
            # The job is recorded and the safety net stages it once the broker is back: --wait waits on.
            self.stderr.write(f"{enqueue.UNREACHABLE}: the job is staged once it is back.")
        if not opts["wait"]:
            self.stdout.write(json.dumps({"job": job.pk, "state": job.state}))
            return
        try:
            job = self.wait(job)
        except KeyboardInterrupt:
            # Waiting is only watching: the job goes on without the terminal.
            raise CommandError(f"Stopped waiting; job {job.pk} goes on (it is {job.state}).") from None
        if job.state != State.SUCCEEDED:
            raise CommandError(f"Job {job.pk} {job.get_state_display().lower()}: {job.error or 'no output'}")
        if opts["output"]:
            self.write_output(job, Path(opts["output"]))
        line = billing().hold_line(job)
        if job.kind == Job.Kind.SAMPLE:
            line["sample"] = self.report_sample(job)
        self.stdout.write(json.dumps(line))

    def check_options(self, opts: dict) -> None:
        if opts["output"] and not opts["wait"]:
            raise CommandError("--output needs --wait.")
        if opts["from_sample"]:
            named = ("data", "work", "sha256", "model")
            given = [f"--{name}" for name in named if opts[name]] + ["--param"] * bool(opts["param"])
            if given or opts["sample"]:
                raise CommandError(
                    f"--from-sample runs the sample's work on its data; drop {(given or ['--sample'])[0]}."
                )
            return
        missing = [f"--{name}" for name in ("data", "work", "hours") if not opts[name]]
        if missing:
            raise CommandError(f"Give {', '.join(missing)} (or --from-sample JOB).")

    def submit_pass(self, organisation: Organisation, user, opts: dict) -> Job:
        sample = Job.objects.filter(organisation=organisation, pk=opts["from_sample"]).first()
        if sample is None:
            raise CommandError(f"{organisation.slug} has no job {opts['from_sample']}.")
        hours = opts["hours"]
        if hours is None:
            try:
                found = sizing.estimate(sample.sample_result, int(opts["gpus"]))
            except ValueError:
                raise CommandError(f"Refused: GPUs must be a whole number, not {opts['gpus']!r}.") from None
            if found is None:
                raise CommandError(f"Refused: job {sample.pk} is not a sample that measured the work; give --hours.")
            hours = found.hours
        return services.submit_pass(sample, user, request_of({**opts, "hours": hours}), retention_of(opts))

    def report_sample(self, job: Job) -> dict:
        """The sample's figures, and the full pass in each shape, on stderr as a table and as data."""
        result, facts = job.sample_result, JobFacts(job)
        online, estimates = facts.fleet, facts.shapes
        if not estimates:
            raise CommandError(f"Sample {job.pk} measured nothing: no shard was done.")
        self.stderr.write(
            f"Sample {job.pk}: {result['records']:,} of {result['records_total']:,} records in "
            f"{result['seconds']:.1f} s, {result['records_per_second']:,.1f} records/s per {online.noun}"
            + (f" ({result['tokens_per_second']:,.1f} tokens/s)" if result.get("tokens_per_second") else "")
            + (f", peak memory {result['peak_memory_mb']:,} MB" if result.get("peak_memory_mb") else "")
        )
        for found in estimates:
            cost = units.money(found.cost, found.currency) if found.cost is not None else "no rate set"
            held = f"{units.hundredths(found.gpu_hours)} {online.noun}-hours"
            expected = f"expected {found.duration}, {held}, {cost}"
            self.stderr.write(f"  {online.count(found.gpus)}: {expected}; ask for --hours {found.hours}")
        if job.sample_was_whole:
            self.stderr.write(services.no_pass_needed(job))
        else:
            self.stderr.write(
                f"Run the full pass with: submit --org {job.organisation.slug} --as {job.created_by.get_username()} "
                f"--from-sample {job.pk} --gpus N"
            )
        return {
            **{name: result.get(name) for name in ("records", "records_total", "seconds", "records_per_second")},
            "startup_seconds": result.get("startup_seconds"),
            "peak_memory_mb": result.get("peak_memory_mb"),
            "tokens_per_second": result.get("tokens_per_second"),
            "estimates": [found.as_json() for found in estimates],
        }

    def submit(self, organisation: Organisation, user, opts: dict) -> Job:
        with ExitStack() as files:
            return services.submit_job(organisation, user, spec_of(opts, organisation, files))

    def wait(self, job: Job) -> Job:
        interactive = sys.stderr.isatty()
        last = ""
        while True:
            job.refresh_from_db()
            line = progress_line(job)
            if interactive or line != last:
                self.stderr.write(line if interactive else line.strip(), ending="" if interactive else "\n")
                last = line
            if job.ended:
                if interactive:
                    self.stderr.write("")
                return job
            time.sleep(0.5)

    def write_output(self, job: Job, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name in job.output_names:
            with open_output_file(job, name) as source, (folder / name).open("wb") as target:
                shutil.copyfileobj(source, target, 1024 * 1024)
        self.stderr.write(f"Output written to {folder}/ ({', '.join(job.output_names)})")
