from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import path

from jobs import enqueue, lifecycle, queue_figures, scheduling
from jobs.models import ACTIVE, ENDED, Allocation, Gpu, Job, JobEvent, Node, Shard, State
from jobs.pages import charts
from jobs.pages.overview import held_now, overview
from jobs.templatetags.jobs_extras import duration
from portal.listing import ListQuery, pager
from portal.text import NameField
from portal.units import size

QUEUE_ROWS = 50  # the queued jobs the queue page shows at a time, and the first running and staging ones
FLEET_NODES = 12  # the nodes whose own charts the fleet page shows at a time
# What the queue page's rows show of a job (and what its time limit and latest start are computed from): not its
# other columns, five of them JSON.
ROW_FIELDS = ("organisation__name", "state", "work", "gpus", "hours", "deadline", "held_before", "on_hold_since")
STAGING_FIELDS = ("source_name", "source_kind", "staging_phase", "staging_done", "staging_total")


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ShardInline(ReadOnlyInline):
    model = Shard
    fields = [
        "index",
        "first_record",
        "record_count",
        "status",
        "attempts",
        "gpu",
        "records_done",
        "records_out",
        "records_rejected",
    ]


class AllocationInline(ReadOnlyInline):
    model = Allocation
    fields = ["gpu", "held_from", "held_to"]


class EventInline(ReadOnlyInline):
    model = JobEvent
    fields = ["state", "at", "message"]


class HoldForm(forms.Form):
    reason = NameField(
        max_length=Job._meta.get_field("on_hold_reason").max_length,
        required=False,
        help_text="Shown to the partner on the job's page, e.g. “maintenance of the fleet until 14:00 UTC”.",
    )


class OnHoldFilter(admin.SimpleListFilter):
    title = "operator hold"
    parameter_name = "on_hold"

    def lookups(self, request, model_admin):
        return [("yes", "On hold"), ("no", "Not on hold")]

    def queryset(self, request, queryset):
        on_hold = Q(on_hold_since__isnull=False) & ~Q(state__in=ENDED)
        if self.value() == "yes":
            return queryset.filter(on_hold)
        if self.value() == "no":
            return queryset.exclude(on_hold)
        return queryset


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "organisation",
        "work",
        "kind",
        "state",
        "on_hold",
        "gpus",
        "hours",
        "records_total",
        "created",
    ]
    list_filter = ["state", OnHoldFilter, "kind", "work", "organisation"]
    search_fields = ["id", "source_name", "organisation__name"]
    # The partner's S3 credentials, even encrypted, and a URL's query (a pre-signed URL's signature)
    # are not for display: the location is shown as the partner's pages show it.
    exclude = ["source_secret", "source_uri", "source_parts"]
    readonly_fields = [
        {"source_uri": "source_location", "source_parts": "parts_shown"}.get(field.name, field.name)
        for field in Job._meta.fields
        if field.name != "source_secret"
    ] + ["input_size", "staging_time"]
    # What an operator looks at first, in groups; the rest (staging's claim and lease, paths in storage, the
    # layout and plan) is bookkeeping, folded away at the end.
    fieldsets = [
        (None, {"fields": ["organisation", "created_by", "kind", "sample", "state", "error"]}),
        ("Operator hold", {"fields": ["on_hold_since", "on_hold_reason"]}),
        ("Work", {"fields": ["work", "params", "model_name"]}),
        ("Data", {"fields": ["source_kind", "source_name", "source_location", "parts_shown", "input_format",
                             "input_size", "input_sha256", "expected_sha256", "records_total", "staging_time"]}),
        ("Request", {"fields": ["gpus", "hours", "shape", "deadline", "allow_partial"]}),
        ("When", {"fields": ["created", "queued_at", "started_at", "held_before", "ended_at", "notified_at"]}),
        ("Output and retention", {"fields": ["records_out", "records_rejected", "output_files", "output_keep_days",
                                             "output_purged_at", "retention_days", "staged_purged_at"]}),
    ]  # fmt: skip
    inlines = [EventInline, AllocationInline, ShardInline]
    actions = ["cancel", "put_on_hold", "lift_hold", "pin_fixed"]
    change_list_template = "admin/jobs/job/change_list_with_queue.html"

    def get_fieldsets(self, request, obj=None):
        shown = {field for _, options in self.fieldsets for field in options["fields"]}
        rest = [field for field in self.readonly_fields if field not in shown]
        return [*self.fieldsets, ("Bookkeeping", {"fields": rest, "classes": ["collapse"]})]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        # A job carries its holds and ledger entries; operators cancel it instead.
        return False

    def get_urls(self):
        queue = path("queue/", self.admin_site.admin_view(self.queue_view), name="jobs_job_queue")
        fleet = path("fleet/", self.admin_site.admin_view(self.fleet_view), name="jobs_job_fleet")
        now = path("overview/", self.admin_site.admin_view(self.overview_view), name="jobs_job_overview")
        return [queue, fleet, now, *super().get_urls()]

    def overview_view(self, request):
        """The fleet and the queue at a glance, in the partners' look and readable on a phone
        (jobs/pages/overview.py); refreshed every 10 s."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {"title": "The fleet and the queue", "now": overview()}
        template = "jobs/overview.html#live" if request.htmx else "jobs/overview.html"
        return TemplateResponse(request, template, context)

    def fleet_view(self, request):
        """The last day of the fleet, the whole fleet's slots and a page of nodes', held against what they used,
        and of the queue's length, as beat sampled them once a minute; refreshed every minute."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        query = ListQuery(request.GET)
        nodes = query.page(charts.sampled_nodes(), per_page=FLEET_NODES)
        context = {
            **self.admin_site.each_context(request),
            "title": "The fleet over the last day",
            "opts": self.model._meta,
            "found": charts.fleet_charts(list(nodes.object_list)),
            "query": query,
            "pager": pager(query, nodes),
        }
        template = "admin/jobs/job/fleet.html#charts" if request.htmx else "admin/jobs/job/fleet.html"
        return TemplateResponse(request, template, context)

    def queue_view(self, request):
        """The queue as the scheduler sees it, live: the jobs in each state, the fleet, the first jobs holding
        slots and until when at the latest, a page of the queue in order (those on hold in their place), and the
        first jobs staging. Every query reads a page or a count, so the page costs the same at any length."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        query = ListQuery(request.GET)
        queue = scheduling.queue().select_related("organisation").only(*ROW_FIELDS, "queued_at", "on_hold_reason")
        page = query.page(queue, per_page=QUEUE_ROWS)
        queued = list(page.object_list)
        figures = queue_figures.read_many(queued)  # as the last scheduling pass worked them out
        if len(figures) < len(queued):  # some were queued since the last pass: the whole queue's, now
            figures = scheduling.queue_figures()
        held_by_node, held_by_job = held_now("gpu__node"), held_now("job")
        nodes = list(Node.objects.annotate(slots=Count("gpus")).order_by("name"))
        running = Job.objects.filter(state=State.RUNNING).select_related("organisation").only(*ROW_FIELDS, "started_at")
        running = list(running.order_by("started_at", "pk")[:QUEUE_ROWS])
        for node in nodes:
            node.held = held_by_node.get(node.pk, 0)
        for job in running:
            job.held = held_by_job.get(job.pk, 0)
        on_hold = Count("pk", filter=Q(on_hold_since__isnull=False))
        active = list(
            Job.objects.filter(state__in=ACTIVE)
            .order_by()
            .values_list("state")
            .annotate(n=Count("pk"), on_hold=on_hold)
        )
        counts = {state: count for state, count, _ in active}
        staging = Job.objects.filter(state__in=(State.SUBMITTED, State.STAGING)).select_related("organisation")
        staging = staging.only(*ROW_FIELDS, *STAGING_FIELDS)
        context = {
            **self.admin_site.each_context(request),
            "title": "The queue",
            "opts": self.model._meta,
            "counts": [(label, counts.get(state, 0)) for state, label in State.choices if state in ACTIVE],
            "on_hold": sum(held for _, _, held in active),
            "nodes": nodes,
            "online": set(Gpu.objects.online().order_by().values_list("node_id", flat=True).distinct()),
            "running": running,
            "queued": [(job, figures.get(job.pk)) for job in queued],
            "query": query,
            "pager": pager(query, page),
            "staging": staging.order_by("created", "pk")[:QUEUE_ROWS],
            "staging_count": counts.get(State.SUBMITTED, 0) + counts.get(State.STAGING, 0),
            "running_count": counts.get(State.RUNNING, 0),
        }
        template = "admin/jobs/job/queue.html#live" if request.htmx else "admin/jobs/job/queue.html"
        return TemplateResponse(request, template, context)

    @admin.action(description="Cancel the selected jobs (releases the slots they hold)", permissions=["change"])
    def cancel(self, request, queryset):
        with enqueue.unsent() as unsent:
            cancelled = [job.pk for job in queryset if lifecycle.cancel(job, by=request.user)]
        messages.success(request, f"Cancelled {len(cancelled)} job{pluralize(len(cancelled))}.")
        if unsent:
            messages.warning(request, f"{enqueue.UNREACHABLE}; the cancels stand.")

    @admin.display(description="Input size")
    def input_size(self, job: Job) -> str:
        return "–" if job.input_bytes is None else f"{size(job.input_bytes)} ({job.input_bytes:,} bytes)"

    @admin.display(description="Staging took")
    def staging_time(self, job: Job) -> str:
        return duration(job.staging_seconds)

    @admin.display(boolean=True, description="On hold")
    def on_hold(self, job: Job) -> bool:
        return job.on_hold

    @admin.action(description="Put the selected jobs on hold (they stage but do not start)", permissions=["change"])
    def put_on_hold(self, request, queryset):
        """First a page that asks why, for the partner; then the hold, for each job that holds no slot yet."""
        form = HoldForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            context = {
                **self.admin_site.each_context(request),
                "title": "Put jobs on hold",
                "opts": self.model._meta,
                "jobs": queryset,
                "form": form,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            }
            return TemplateResponse(request, "admin/jobs/job/put_on_hold.html", context)
        reason = form.cleaned_data["reason"]
        for job in queryset:
            if lifecycle.put_on_hold(job, reason=reason):
                self.log_change(request, job, f"Put on hold{f': {reason}' if reason else ''}.")
                messages.success(request, f"Job #{job.pk} is on hold: it will not start until the hold is lifted.")
            elif job.on_hold:
                messages.warning(request, f"Job #{job.pk} was on hold already.")
            else:
                messages.error(
                    request,
                    f"Job #{job.pk} is {job.get_state_display().lower()}: only a job that holds no slot yet "
                    "can be put on hold; cancel it to stop it.",
                )
        return None

    @admin.action(description="Lift the hold of the selected jobs (they start in their place)", permissions=["change"])
    def lift_hold(self, request, queryset):
        with enqueue.unsent() as unsent:
            lifted = [job for job in queryset if lifecycle.lift_hold(job)]
        for job in lifted:
            self.log_change(request, job, "Lifted its hold.")
        messages.success(request, f"Lifted the hold of {len(lifted)} job{pluralize(len(lifted))}.")
        if unsent:
            messages.warning(request, f"{enqueue.UNREACHABLE}: they start in their place once it is back.")

    @admin.action(description="Pin the selected jobs to fixed requests (all slots at once)", permissions=["change"])
    def pin_fixed(self, request, queryset):
        pinned = [job for job in queryset if lifecycle.pin_fixed(job)]
        for job in pinned:
            self.log_change(request, job, "Pinned to a fixed request.")
        messages.success(request, f"Pinned {len(pinned)} job{pluralize(len(pinned))} to a fixed request.")
        if len(pinned) < len(queryset):
            skipped = "Only a flexible job that holds no slot yet can be pinned; the others are as they were."
            messages.warning(request, skipped)


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ["index", "kind", "name", "uuid", "memory_mb", "utilisation", "memory_used_mb", "queue", "last_seen"]
    readonly_fields = fields


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "online", "hostname", "driver", "kinds", "last_seen"]
    inlines = [GpuInline]

    @admin.display(boolean=True, description="Online")
    def online(self, node: Node) -> bool:
        """Its slots heard from lately, as the scheduler counts them."""
        return Gpu.objects.filter(node=node).online().exists()

    @admin.display(description="Work kinds")
    def kinds(self, node: Node) -> str:
        return ", ".join(node.work_kinds) or "–"


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["__str__", "kind", "utilisation", "memory_used_mb", "memory_mb", "queue", "last_seen"]
    list_filter = ["kind", "node"]
