from django.contrib import admin, messages

from jobs import lifecycle
from jobs.models import Allocation, Gpu, Job, JobEvent, Node, Shard


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ShardInline(ReadOnlyInline):
    model = Shard
    fields = ["index", "first_record", "record_count", "status", "attempts", "gpu", "records_out", "records_rejected"]


class AllocationInline(ReadOnlyInline):
    model = Allocation
    fields = ["gpu", "held_from", "held_to"]


class EventInline(ReadOnlyInline):
    model = JobEvent
    fields = ["state", "at", "message"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "organisation", "work", "kind", "state", "gpus", "hours", "records_total", "created"]
    list_filter = ["state", "kind", "work", "organisation"]
    search_fields = ["id", "source_name", "organisation__name"]
    # The partner's S3 credentials, even encrypted, and a URL's query (a pre-signed URL's signature)
    # are not for display: the location is shown as the partner's pages show it.
    exclude = ["source_secret", "source_uri"]
    readonly_fields = [
        "source_location" if field.name == "source_uri" else field.name
        for field in Job._meta.fields
        if field.name != "source_secret"
    ]
    inlines = [EventInline, AllocationInline, ShardInline]
    actions = ["cancel"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        # A job carries its holds and ledger entries; operators cancel it instead.
        return False

    @admin.action(description="Cancel the selected jobs (releases their GPUs)", permissions=["change"])
    def cancel(self, request, queryset):
        cancelled = [job.pk for job in queryset if lifecycle.cancel(job, by=request.user)]
        messages.success(request, f"Cancelled {len(cancelled)} job(s).")


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
