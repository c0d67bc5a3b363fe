from django.contrib import admin
from django.utils import timezone

from ingest.models import Device, IngestKey, Project, Release, ResourceSample, Step, Task


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    filter_horizontal = ["members"]


@admin.register(IngestKey)
class IngestKeyAdmin(admin.ModelAdmin):
    """Keys are created with `manage.py create_key` (the plaintext is shown once); here they can
    be inspected and revoked, never read back."""

    list_display = ["prefix", "project", "name", "scopes", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["project"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


@admin.register(Release)
class ReleaseAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "first_seen", "last_seen"]
    list_filter = ["project"]


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["task_id", "name", "project", "release", "status", "started_at", "duration_ms", "step_count"]
    list_filter = ["project", "status"]
    search_fields = ["task_id", "name"]
    show_full_result_count = False


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    list_display = ["step_id", "kind", "name", "task", "started_at", "duration_ms", "status"]
    list_filter = ["kind", "status"]
    raw_id_fields = ["task"]
    show_full_result_count = False


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = ["name", "vendor", "hardware", "project", "last_seen"]
    list_filter = ["vendor", "project"]


@admin.register(ResourceSample)
class ResourceSampleAdmin(admin.ModelAdmin):
    list_display = ["device", "ts", "utilization", "queue_depth", "temperature_c", "throttled"]
    show_full_result_count = False
