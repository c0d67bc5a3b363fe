from django import forms
from django.contrib import admin

from ingest.conventions import short_host
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


class DeviceForm(forms.ModelForm):
    class Meta:
        model = Device
        fields = ["host"]
        help_texts = {"host": "The host a server and its GPUs share: dcgm-exporter's Hostname (or host.name) of "
                              "its GPUs. Set it by hand where a server's address names another host (a load "
                              "balancer, localhost); the exporters then no longer change it. Leave it empty to "
                              "take the host the exporters report again."}


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    """Servers and GPUs as ingest found them. A server's GPUs are the GPUs on its host (docs/otlp.md,
    "Which server and GPU served a call"): where the names differ, the host is mapped here."""

    form = DeviceForm
    list_display = ["name", "role", "host", "host_by_hand", "vendor", "hardware", "project", "last_seen"]
    list_filter = ["role", "vendor", "host_by_hand", "project"]
    search_fields = ["name", "host"]
    readonly_fields = ["project", "name", "role", "vendor", "hardware", "host_by_hand", "labels", "first_seen",
                       "last_seen"]
    fields = ["project", "name", "role", "host", "host_by_hand", "vendor", "hardware", "labels", "first_seen",
              "last_seen"]

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        if "host" in form.changed_data:
            obj.host = short_host(obj.host)
            obj.host_by_hand = bool(obj.host)
        super().save_model(request, obj, form, change)


@admin.register(ResourceSample)
class ResourceSampleAdmin(admin.ModelAdmin):
    list_display = ["device", "ts", "utilization", "queue_depth", "temperature_c", "throttled"]
    show_full_result_count = False
