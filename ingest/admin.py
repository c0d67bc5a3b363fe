from django.contrib import admin

from ingest.models import (
    Device,
    IngestKey,
    Project,
    ProjectMembership,
    Release,
    ResourceSample,
    Step,
    Task,
)
from ingest.services import key_revoke


class MembershipInline(admin.TabularInline):
    """Read-only here: members are added and re-roled in the settings pages or with
    `manage.py add_member`, which keep the audit trail."""

    model = ProjectMembership
    extra = 0
    fields = readonly_fields = ["user", "role", "added_at"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    """Members and keys are managed in the product's settings pages (audited); this is the
    operator's view."""

    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(IngestKey)
class IngestKeyAdmin(admin.ModelAdmin):
    """Keys are created in Settings or with `manage.py create_key` (the plaintext is shown once);
    here they can be inspected and revoked, never read back."""

    list_display = ["prefix", "project", "name", "scopes", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["project"]
    # Nothing is edited here (scopes and revocation change through the audited services).
    readonly_fields = ["project", "name", "prefix", "key_hash", "scopes", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        for key in queryset.filter(revoked_at__isnull=True).select_related("project"):
            key_revoke(key=key, actor=request.user)


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
