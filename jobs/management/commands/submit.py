"""`manage.py submit`: a job from the terminal, through the same path as the browser form.

Exit 0 when the job is accepted (or, with --wait, when it succeeds); otherwise a one-line reason
and a non-zero exit.
"""

import json
import shutil
import sys
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from billing.models import LedgerEntry
from jobs import services
from jobs.models import Job, State
from jobs.outputs.assemble import open_output_file
from jobs.staging import sources
from portal.models import Organisation


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CommandError(f"--param takes name=value, not {pair!r}")
        params[name] = value
    return params


def progress_line(job: Job) -> str:
    progress = services.progress(job)
    done = int(30 * progress.percent / 100)
    bar = "#" * done + "-" * (30 - done)
    rate = f" · {progress.records_per_second:,.0f} rec/s" if progress.records_per_second else ""
    return (
        f"\r[{bar}] {progress.percent:3d}% {progress.records_done:,}/{progress.records_total:,} records "
        f"· {job.get_state_display().lower()}{rate}   "
    )


class Command(BaseCommand):
    help = "Submit a dataset pass as a job, optionally wait for it and fetch its output."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="The organisation's slug or name.")
        parser.add_argument(
            "--data", required=True, help="A file to upload, an http(s) URL, or a path under a staging root."
        )
        parser.add_argument("--work", required=True, help="The work kind, e.g. clean-table.")
        parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
        parser.add_argument("--gpus", required=True)
        parser.add_argument("--hours", required=True)
        parser.add_argument("--shape", default=Job.Shape.SHORT_WIDE, choices=Job.Shape.values)
        parser.add_argument("--keep-days", type=int, default=0, help="Keep the staged copy this many days.")
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
        if opts["output"] and not opts["wait"]:
            raise CommandError("--output needs --wait.")
        try:
            job = self.submit(organisation, opts)
        except services.SubmitError as error:
            raise CommandError(f"Refused: {error}") from None
        job.refresh_from_db()
        if job.state == State.FAILED:
            raise CommandError(f"Job {job.pk} failed: {job.error}")
        self.stderr.write(f"Job {job.pk} submitted: {job.gpus} × {job.hours} h of {job.work} over {job.source_name}")
        if not opts["wait"]:
            self.stdout.write(json.dumps({"job": job.pk, "state": job.state}))
            return
        job = self.wait(job)
        if job.state != State.SUCCEEDED:
            raise CommandError(f"Job {job.pk} {job.get_state_display().lower()}: {job.error or 'no output'}")
        if opts["output"]:
            self.write_output(job, Path(opts["output"]))
        entry = LedgerEntry.objects.get(job=job, kind=LedgerEntry.Kind.HOLD)
        self.stdout.write(
            json.dumps(
                {
                    "job": job.pk,
                    "kind": entry.kind,
                    "gpus": entry.gpus,
                    "held_from": entry.held_from.isoformat(),
                    "held_to": entry.held_to.isoformat(),
                    "seconds": entry.seconds,
                    "gpu_hours": str(entry.gpu_hours),
                    "rate": str(entry.rate),
                    "currency": entry.currency,
                    "amount": str(entry.amount),
                }
            )
        )

    def submit(self, organisation: Organisation, opts: dict) -> Job:
        """A URL, or a file in the organisation's staging folder, is staged from where it is; any other
        file is uploaded."""
        request = {
            "organisation": organisation,
            "user": None,
            "work": opts["work"],
            "params": parse_params(opts["param"]),
            "gpus": opts["gpus"],
            "hours": opts["hours"],
            "shape": opts["shape"],
            "retention_days": opts["keep_days"],
            "expected_sha256": opts["sha256"],
            "allow_partial": opts["allow_partial"],
        }
        data = opts["data"]
        in_staging_folder = sources.within(Path(data).resolve(), sources.organisation_roots(organisation.slug))
        if "://" in data or in_staging_folder:
            return services.submit_job(location=data if "://" in data else str(Path(data).resolve()), **request)
        path = Path(data)
        if not path.is_file():
            raise CommandError(f"There is no file {path}.")
        with path.open("rb") as stream:
            return services.submit_job(data=stream, data_name=path.name, **request)

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
