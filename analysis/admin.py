from django.contrib import admin

from analysis.costs import price_delete, price_save
from analysis.models import Baseline, Finding, ModelPrice, TaskAnalysis


@admin.register(Finding)
class FindingAdmin(admin.ModelAdmin):
    list_display = ["kind", "task", "wasted_ms", "severity", "summary", "task_started_at"]
    list_filter = ["kind", "severity"]
    raw_id_fields = ["task"]
    show_full_result_count = False


@admin.register(TaskAnalysis)
class TaskAnalysisAdmin(admin.ModelAdmin):
    list_display = ["task", "analyzed_at", "wasted_ms", "top_finding"]
    raw_id_fields = ["task"]
    show_full_result_count = False


@admin.register(Baseline)
class BaselineAdmin(admin.ModelAdmin):
    list_display = ["kind", "key", "device", "count", "median_ms", "mad_ms", "p99_ms", "updated_at"]
    list_filter = ["kind"]


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = ["model", "input_per_million", "output_per_million", "effective_from", "note"]
    list_filter = ["model"]
    search_fields = ["model"]
    ordering = ["model", "-effective_from"]

    # Through the audited write path, like the settings pages' price form.
    def save_model(self, request, obj, form, change):
        price_save(price=obj, values=form.cleaned_data, actor=request.user)

    def delete_model(self, request, obj):
        price_delete(price=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for price in queryset:
            price_delete(price=price, actor=request.user)
