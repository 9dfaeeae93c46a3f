from datetime import UTC, datetime, timedelta

from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from jobs import retention
from jobs.models import Job, JobEvent, UsageHour


def test_it_has_a_migration_for_every_model_change(db):
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_outputs_of_jobs_ended_before_output_retention_are_kept_thirty_days_from_the_migration(transactional_db):
    """Until 0013 outputs were kept for ever: the first purge after it must not delete old ones."""

    executor = MigrationExecutor(connection)
    executor.migrate([("jobs", "0012_held_before")])
    old = executor.loader.project_state([("jobs", "0012_held_before")]).apps
    organisation = old.get_model("portal", "Organisation").objects.create(name="Old Lab", slug="old-lab")
    ended = timezone.now() - timedelta(days=400)
    job = old.get_model("jobs", "Job").objects.create(
        organisation=organisation, work="clean-table", source_name="a.csv", gpus=1, hours=1, state="succeeded",
        ended_at=ended, output_path="jobs/1/output",
    )  # fmt: skip
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    kept = Job.objects.get(pk=job.pk)
    assert kept.output_keep_days == 431
    assert retention.output_due_at(kept) >= timezone.now() + timedelta(days=29)
    assert retention.purge_expired() == []


def test_every_table_the_migrations_make_belongs_to_a_model(db):
    """A table no model owns is one the tests' flush cannot empty, and PostgreSQL then refuses to truncate
    the tables it refers to (knox's own token table, swapped out for api.ApiToken, did that)."""
    tables = set(connection.introspection.table_names())
    owned = set(connection.introspection.django_table_names(include_views=False))
    assert tables - owned - {"django_migrations"} == set()


def test_the_timelines_holds_written_before_0022_read_as_holds(transactional_db):
    """Until 0022 a hold put or lifted was a line under the state the job was in, told apart by its words."""
    executor = MigrationExecutor(connection)
    executor.migrate([("jobs", "0021_job_model_source")])
    old = executor.loader.project_state([("jobs", "0021_job_model_source")]).apps
    organisation = old.get_model("portal", "Organisation").objects.create(name="Old Lab", slug="old-lab")
    job = old.get_model("jobs", "Job").objects.create(
        organisation=organisation, work="clean-table", source_name="a.csv", gpus=1, hours=1, state="queued"
    )
    for message in ["queued", "put on hold by the operators: fleet maintenance", "hold lifted by the operators"]:
        old.get_model("jobs", "JobEvent").objects.create(job=job, state="queued", message=message)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert list(JobEvent.objects.filter(job=job.pk).values_list("hold", flat=True)) == ["", "put", "lifted"]


def test_the_holds_ended_before_0025_are_rolled_up_for_the_fair_share(transactional_db):
    """0025 sums the ledger's past into the roll-up the fair share reads since: by organisation and hour."""
    executor = MigrationExecutor(connection)
    executor.migrate([("jobs", "0024_flexible_requests")])
    old = executor.loader.project_state([("jobs", "0024_flexible_requests")]).apps
    organisation = old.get_model("portal", "Organisation").objects.create(name="Old Lab", slug="old-lab")
    node = old.get_model("jobs", "Node").objects.create(name="old-node", hostname="old")
    slots = [old.get_model("jobs", "Gpu").objects.create(node=node, index=i, queue=f"slot.old.{i}") for i in range(3)]
    job = old.get_model("jobs", "Job").objects.create(
        organisation=organisation, work="clean-table", source_name="a.csv", gpus=3, hours=1, state="running"
    )
    hour = datetime(2026, 11, 30, 9, tzinfo=UTC)
    holds = [
        (hour, hour + timedelta(minutes=20)),
        (hour + timedelta(minutes=5), hour + timedelta(minutes=65)),
        (hour, None),
    ]
    for slot, (start, end) in zip(slots, holds, strict=True):
        old.get_model("jobs", "Allocation").objects.create(job=job, gpu=slot, held_from=start, held_to=end)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    rows = UsageHour.objects.filter(organisation=organisation.pk).order_by("hour").values_list("hour", "seconds")
    assert list(rows) == [(hour, 1200.0), (hour + timedelta(hours=1), 3600.0)], "an open hold is not rolled up"
