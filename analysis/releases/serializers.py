"""JSON shapes of the release endpoints. They document the OpenAPI schema and make sure the API
returns exactly the fields listed here."""

from rest_framework import serializers


def Number():  # noqa: N802 (reads like a field class where it is used)
    return serializers.FloatField(allow_null=True)


class PercentileChangeSerializer(serializers.Serializer):
    q = serializers.IntegerField(help_text="the percentile: 50, 90, 95 or 99")
    a_ms = Number()
    b_ms = Number()
    delta_ms = Number()
    delta_pct = Number()
    ci_low_ms = Number()
    ci_high_ms = Number()


class TaskComparisonSerializer(serializers.Serializer):
    name = serializers.CharField(allow_null=True, help_text="task name; null for all tasks")
    n_a = serializers.IntegerField()
    n_b = serializers.IntegerField()
    mean_a_ms = Number()
    mean_b_ms = Number()
    error_rate_a = Number()
    error_rate_b = Number()
    p_value = Number()
    percentiles = PercentileChangeSerializer(many=True)
    label = serializers.CharField(help_text="regressed, improved, slower, faster, "
                                            "no significant change or insufficient data")
    verdict = serializers.CharField()
    regressed = serializers.BooleanField()
    improved = serializers.BooleanField()
    significant = serializers.BooleanField()
    warnings = serializers.ListField(child=serializers.CharField())
    sampled_a = serializers.IntegerField(help_text="durations used for the bootstrap and the test")
    sampled_b = serializers.IntegerField()


class SummaryRowSerializer(serializers.Serializer):
    metric = serializers.CharField()
    a = Number()
    b = Number()
    delta = Number()
    delta_pct = Number()


class AttributionRowSerializer(serializers.Serializer):
    key = serializers.CharField()
    kind = serializers.CharField(allow_blank=True)
    name = serializers.CharField(allow_blank=True)
    significant = serializers.BooleanField(help_text="its calls or its contribution changed "
                                                     "significantly (Bonferroni over the rows)")
    per_call_p_value = Number()
    contribution_ms = Number()
    contribution_se_ms = Number()
    duration_effect_ms = Number()
    duration_effect_se_ms = Number()
    frequency_effect_ms = Number()
    frequency_effect_se_ms = Number()
    contribution_share = Number()
    mean_a_ms = Number()
    mean_b_ms = Number()
    share_a = Number()
    share_b = Number()
    p50_a_ms = Number()
    p50_b_ms = Number()
    p95_a_ms = Number()
    p95_b_ms = Number()
    calls_per_task_a = Number()
    calls_per_task_b = Number()
    tokens_per_task_a = Number()
    tokens_per_task_b = Number()
    error_rate_a = Number()
    error_rate_b = Number()


class AttributionSerializer(serializers.Serializer):
    method = serializers.CharField()
    sample = serializers.DictField(child=serializers.JSONField())
    mean_delta_ms = serializers.FloatField()
    within_delta_ms = serializers.FloatField(help_text="change in mean duration within task names")
    mix_ms = serializers.FloatField(help_text="change due to a different mix of task names")
    steps = AttributionRowSerializer(many=True)
    kinds = AttributionRowSerializer(many=True)
    tools = AttributionRowSerializer(many=True)
    models = AttributionRowSerializer(many=True)


class BudgetRowSerializer(serializers.Serializer):
    category = serializers.CharField()
    mean_a_ms = Number()
    mean_b_ms = Number()
    delta_ms = Number()
    share_a = Number()
    share_b = Number()


class FindingRateSerializer(serializers.Serializer):
    kind = serializers.CharField()
    rate_a = Number()
    rate_b = Number()
    wasted_per_task_a_ms = Number()
    wasted_per_task_b_ms = Number()
    delta_rate = Number()
    delta_wasted_ms = Number()
    summary = serializers.CharField()


class WhatIfRowSerializer(serializers.Serializer):
    scenario = serializers.CharField()
    projected_a_ms = Number()
    projected_b_ms = Number()
    saved_a_ms = Number()
    saved_b_ms = Number()
    tasks_a = serializers.IntegerField()
    tasks_b = serializers.IntegerField()


class SlowerStepSerializer(serializers.Serializer):
    key = serializers.CharField()
    p50_a_ms = Number()
    p50_b_ms = Number()
    contribution_ms = Number()
    per_call_p_value = Number()


class ReleaseComparisonSerializer(serializers.Serializer):
    project = serializers.CharField()
    a = serializers.CharField()
    b = serializers.CharField()
    filters = serializers.DictField(child=serializers.CharField())
    threshold_pct = serializers.FloatField()
    alpha = serializers.FloatField()
    headline_percentiles = serializers.ListField(
        child=serializers.IntegerField(), help_text="the percentiles a regression is judged on")
    interval_level = serializers.FloatField(
        help_text="confidence level of each interval: 1 - alpha / number of headline percentiles")
    regressed = serializers.BooleanField(help_text="true when any task name regressed")
    slower_steps = SlowerStepSerializer(
        many=True, help_text="steps whose calls got slower by the threshold or more (per-call p50, "
                             "significant) and that added time per task, largest first")
    overall = TaskComparisonSerializer()
    tasks = TaskComparisonSerializer(many=True)
    summary = SummaryRowSerializer(many=True)
    attribution = AttributionSerializer()
    budget = BudgetRowSerializer(many=True)
    findings = FindingRateSerializer(many=True)
    whatif = WhatIfRowSerializer(many=True)
    cost = serializers.JSONField(
        help_text="token cost (analysis/costs.py): per task and per LLM step for a and b in US dollars, their "
                  "deltas, unpriced LLM steps and models, and per LLM step group (kind:name) the cost per task and "
                  "per call; null where no price applies")


class SparkPointSerializer(serializers.Serializer):
    bucket = serializers.IntegerField()
    p95_ms = serializers.FloatField()
    tasks = serializers.IntegerField()


class ReleaseSerializer(serializers.Serializer):
    name = serializers.CharField()
    first_seen = serializers.DateTimeField(allow_null=True)
    last_seen = serializers.DateTimeField(allow_null=True)
    tasks = serializers.IntegerField()
    p50_ms = serializers.FloatField(allow_null=True)
    p95_ms = serializers.FloatField(allow_null=True)
    sparkline = SparkPointSerializer(many=True)


class ReleaseListSerializer(serializers.Serializer):
    results = ReleaseSerializer(many=True)
