"""JSON shapes of the read API."""

from rest_framework import serializers

from analysis import costs
from analysis.dashboard import remedies
from analysis.models import Finding
from ingest.models import Step, Task


class TaskSerializer(serializers.ModelSerializer):
    wasted_ms = serializers.SerializerMethodField()
    top_finding = serializers.SerializerMethodField()
    cost_usd = serializers.SerializerMethodField(
        help_text="token cost of the task's priced LLM steps, US dollars (analysis/costs.py); null when "
                  "none could be priced: a model without a price is never counted as 0")
    llm_steps = serializers.SerializerMethodField()
    unpriced_llm_steps = serializers.SerializerMethodField(help_text="LLM steps of models with no price")

    class Meta:
        model = Task
        fields = ["task_id", "name", "release", "environment", "session_id", "started_at",
                  "ended_at", "duration_ms", "status", "step_count", "input_tokens",
                  "output_tokens", "error_count", "wasted_ms", "top_finding", "cost_usd", "llm_steps",
                  "unpriced_llm_steps"]

    def _cost(self, task) -> costs.Cost:
        """The view sets `cost` on a page of tasks at once (costs.task_costs); else one query."""
        cost = getattr(task, "cost", None)
        if cost is None:
            cost = task.cost = costs.task_cost(task=task)
        return cost

    def get_cost_usd(self, task) -> float | None:
        return self._cost(task).usd

    def get_llm_steps(self, task) -> int:
        return self._cost(task).llm_steps

    def get_unpriced_llm_steps(self, task) -> int:
        return self._cost(task).unpriced

    def _analysis(self, task):
        return getattr(task, "analysis", None) if hasattr(task, "analysis") else None

    def get_wasted_ms(self, task) -> float | None:
        analysis = self._analysis(task)
        return analysis.wasted_ms if analysis else None

    def get_top_finding(self, task) -> str:
        analysis = self._analysis(task)
        return analysis.top_finding if analysis else ""


class StepSerializer(serializers.ModelSerializer):
    depth = serializers.IntegerField(read_only=True)

    class Meta:
        model = Step
        fields = ["step_id", "parent_step_id", "depth", "kind", "name", "started_at", "ended_at",
                  "duration_ms", "status", "error", "depends_on", "model", "provider", "device",
                  "input_tokens", "output_tokens", "cached_tokens", "ttft_ms", "streamed",
                  "tool_name", "tool_args", "tool_result", "tool_call_id", "tool_call_ids", "attributes",
                  "events"]


class FindingSerializer(serializers.ModelSerializer):
    task_id = serializers.CharField(source="task.task_id", read_only=True)
    confidence = serializers.ChoiceField(
        choices=Finding.CONFIDENCES, read_only=True,
        help_text="how sure the detector is; a low-confidence finding counts in no wasted-time total")
    confidence_reason = serializers.CharField(read_only=True, help_text="what the confidence rests on")
    remedy = serializers.SerializerMethodField(
        help_text="what to change, from the finding's evidence, with the time it would save; null when the "
                  "evidence names no change")

    class Meta:
        model = Finding
        fields = ["id", "kind", "task_id", "step_ids", "wasted_ms", "severity", "confidence",
                  "confidence_reason", "summary", "remedy", "evidence", "release", "task_started_at"]

    def get_remedy(self, finding: Finding) -> str | None:
        return remedies.remedy(finding.kind, finding.evidence, finding.wasted_ms, counted=finding.is_counted,
                               step_ids=finding.step_ids)


class TaskDetailSerializer(TaskSerializer):
    attributes = serializers.JSONField()
    steps = StepSerializer(many=True)
    findings = FindingSerializer(many=True)
    critical_path = serializers.ListField(child=serializers.CharField())
    budget = serializers.DictField(child=serializers.FloatField())
    whatif = serializers.JSONField()
    analyzed_at = serializers.DateTimeField(allow_null=True)
    analysis_limited = serializers.JSONField(
        allow_null=True, help_text='null, or for a task too large to analyse fully: {"reason": "too_large", "steps",'
                                   ' "analysed_steps", "limit", "analysed_until", "note"} (what the analysis covered)')

    class Meta(TaskSerializer.Meta):
        fields = TaskSerializer.Meta.fields + ["attributes", "steps", "findings", "critical_path",
                                               "budget", "whatif", "analyzed_at", "analysis_limited"]


class TaskPageSerializer(serializers.Serializer):
    results = TaskSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class FindingPageSerializer(serializers.Serializer):
    results = FindingSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class LatencyRowSerializer(serializers.Serializer):
    group = serializers.CharField()
    count = serializers.IntegerField()
    p50 = serializers.FloatField(allow_null=True)
    p90 = serializers.FloatField(allow_null=True)
    p95 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)
    max = serializers.FloatField(allow_null=True)


class LatencyPageSerializer(serializers.Serializer):
    group_by = serializers.CharField()
    results = LatencyRowSerializer(many=True)


class AnalysisLagSerializer(serializers.Serializer):
    lag_seconds = serializers.FloatField(help_text="age of the oldest due task not analysed yet, since it became due")
    pending_tasks = serializers.IntegerField(help_text="due tasks waiting for analysis (counted up to 100,000)")
    oldest_due_at = serializers.CharField(allow_null=True)


class RollupLagSerializer(serializers.Serializer):
    watermark = serializers.CharField(allow_null=True, help_text="the last completed rollup refresh")
    lag_seconds = serializers.FloatField(allow_null=True)
    hours_behind = serializers.IntegerField(allow_null=True, help_text="complete hours not rolled up yet")


class JobFailureSerializer(serializers.Serializer):
    failures = serializers.IntegerField(help_text="failures in a row of this job's part for the project")
    first_error_at = serializers.CharField()
    last_error_at = serializers.CharField()
    last_error = serializers.CharField(help_text="the exception of the last failure")
    retry_at = serializers.CharField(help_text="when the part is tried again (back-off doubles per failure)")


class StatusSerializer(serializers.Serializer):
    project = serializers.CharField()
    now = serializers.CharField()
    analysis = AnalysisLagSerializer()
    rollups = RollupLagSerializer()
    queue_depth = serializers.IntegerField(allow_null=True, help_text="analysis messages waiting in the broker")
    behind = serializers.CharField(help_text='"findings are N minutes behind", or "" when they are current')
    jobs = serializers.DictField(child=JobFailureSerializer(), help_text=(
        "the periodic jobs (rollups, retention, baselines, learned_pairs, alerts) failing for this project, "
        "by job; {} when none is"))
