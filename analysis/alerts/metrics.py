"""The metrics an alert rule can watch, each one query over a time window of a project's data.

Every query is bounded by the window on an indexed time column (tasks: (project, started_at);
steps: (project, kind, name, started_at), (project, model|device, started_at) and a BRIN on
started_at; findings: (project, kind, task_started_at)), so evaluating a rule reads the
window's rows, never the project's history. Percentiles are Postgres' `percentile_cont`
(linear interpolation, the same definition as numpy's default), computed in the database.

Units: latency metrics in milliseconds, rates and shares in percent (0–100), so "repeated
tool calls in more than 5% of tasks" is `finding_rate > 5` with finding_kind
`repeated_tool_call`.

A task belongs to a window by its start time: a task is charged to the minute it started,
which is what a user means by "traffic of the last 10 minutes" and what the index serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum

from analysis.measures import PercentileCont, Tpot
from analysis.models import Finding
from ingest.models import Project, Step, Task

# metric name → (source, percentile or None, what it measures). Sources: task, step, ttft, tpot,
# error, finding, wasted.
METRICS: dict[str, tuple[str, float | None, str]] = {
    "task_duration_p50": ("task", 0.50, "task duration p50 (ms)"),
    "task_duration_p90": ("task", 0.90, "task duration p90 (ms)"),
    "task_duration_p95": ("task", 0.95, "task duration p95 (ms)"),
    "task_duration_p99": ("task", 0.99, "task duration p99 (ms)"),
    "step_duration_p95": ("step", 0.95, "step duration p95 (ms)"),
    "step_duration_p99": ("step", 0.99, "step duration p99 (ms)"),
    "ttft_p95": ("ttft", 0.95, "time to first token p95 (ms)"),
    "ttft_p99": ("ttft", 0.99, "time to first token p99 (ms)"),
    "tpot_p95": ("tpot", 0.95, "time per output token p95 (ms/token)"),
    "error_rate": ("error", None, "tasks ending in error or timeout (%)"),
    "finding_rate": ("finding", None, "tasks with a finding of the kind (%)"),
    "wasted_share": ("wasted", None, "wasted time as a share of task time (%)"),
}
FINDING_METRICS = {"finding_rate", "wasted_share"}
TASK_FILTERS = {"task_name": "name", "release": "release", "environment": "environment"}
STEP_FILTERS = {"step_kind": "kind", "step_name": "name", "model": "model", "device": "device"}



def unit(metric: str, baseline: str = "none") -> str:
    """What a rule's values are in (units.fmt_value reads them): a change against a baseline in
    percent, TPOT in ms per token, other latencies in ms, rates and shares in percent."""
    if baseline != "none":
        return "% change"
    if metric == "tpot_p95":
        return "ms/token"
    return "ms" if METRICS.get(metric, ("", None))[1] is not None else "%"

@dataclass(frozen=True)
class MetricSpec:
    """What to measure: a metric, the rule's filters and, for finding metrics, the kind."""

    metric: str
    filters: dict
    finding_kind: str = ""


@dataclass(frozen=True)
class Measurement:
    value: float | None
    sample_count: int
    start: datetime
    end: datetime


def _tasks(project: Project, spec: MetricSpec, start: datetime, end: datetime) -> QuerySet[Task]:
    qs = Task.objects.filter(project=project, started_at__gte=start, started_at__lt=end)
    for key, column in TASK_FILTERS.items():
        if spec.filters.get(key):
            qs = qs.filter(**{column: spec.filters[key]})
    step_filters = {column: spec.filters[key] for key, column in STEP_FILTERS.items() if spec.filters.get(key)}
    if step_filters:
        # A task-level metric scoped by a step field: the tasks with at least one such step
        # ("p95 of tasks that ran on groq-lpu-03").
        qs = qs.filter(Exists(Step.objects.filter(project=project, task=OuterRef("pk"), **step_filters)))
    return qs


def _steps(project: Project, spec: MetricSpec, start: datetime, end: datetime) -> QuerySet[Step]:
    qs = Step.objects.filter(project=project, started_at__gte=start, started_at__lt=end)
    for key, column in STEP_FILTERS.items():
        if spec.filters.get(key):
            qs = qs.filter(**{column: spec.filters[key]})
    for key, column in TASK_FILTERS.items():
        if spec.filters.get(key):
            qs = qs.filter(**{f"task__{column}": spec.filters[key]})
    return qs


def _percentile_source(project, spec, start, end, source):
    """The queryset and the expression whose percentile the metric is."""
    if source == "task":
        return _tasks(project, spec, start, end).filter(duration_ms__isnull=False), F("duration_ms")
    steps = _steps(project, spec, start, end)
    if source == "step":
        return steps, F("duration_ms")
    if source == "ttft":
        return steps.filter(ttft_ms__isnull=False), F("ttft_ms")
    # tpot: the steps whose TPOT is defined (analysis.measures), so the count is of those.
    return steps.annotate(tpot=Tpot()).filter(tpot__isnull=False), F("tpot")


def _rate(numerator: int, denominator: int) -> float | None:
    return 100.0 * numerator / denominator if denominator else None


# Alert filter → the step rollup's group_by (analysis.rollups.STEP_GROUPS).
_ROLLUP_STEP_GROUPS = {"step_kind": "kind", "step_name": "name", "model": "model", "device": "device"}


def measure_rolled_up(*, project: Project, spec: MetricSpec, start: datetime, end: datetime) -> Measurement | None:
    """A latency percentile over a long window (a release baseline: its last 7 days) from the
    latency rollups, within their 1.93 % (analysis/rollups/); None when
    the metric or the filters need the raw rows. Whole hours of the rollups count by their tasks'
    start, so a step of a task that started before `start` may be left out at the window's edge.
    TPOT is read raw for now, though the rollups hold the same definition (analysis.measures)."""
    from analysis import rollups
    from analysis.filters import TaskFilters

    source, fraction, _ = METRICS[spec.metric]
    if fraction is None or source not in ("task", "step", "ttft"):
        return None
    filters = {k: v for k, v in spec.filters.items() if v}
    scope = TaskFilters(release=filters.pop("release", ""), environment=filters.pop("environment", ""),
                        since=start, until=end)
    if source == "task":
        if set(filters) - {"task_name"}:
            return None
        found = rollups.task_summaries(project=project, filters=TaskFilters(**{**vars(scope),
                                                                               "name": filters.get("task_name", "")}))
    else:
        if len(filters) > 1 or not set(filters) <= set(_ROLLUP_STEP_GROUPS):
            return None
        key, value = next(iter(filters.items()), ("step_kind", ""))
        found = rollups.step_summaries(project=project, filters=scope, group_by=_ROLLUP_STEP_GROUPS[key],
                                       group=value, metric="duration" if source == "step" else "ttft")
    if found is None:
        return None
    total = rollups.Summary()
    for summary in found.values():
        total.merge(summary)
    value = total.quantiles((fraction,))
    return Measurement(value[0] if value else None, total.timed, start, end)


def measure(*, project: Project, spec: MetricSpec, start: datetime, end: datetime) -> Measurement:
    """The metric over [start, end) and how many samples (tasks or steps) it rests on."""
    source, fraction, _ = METRICS[spec.metric]
    if fraction is not None:
        qs, expression = _percentile_source(project, spec, start, end, source)
        row = qs.aggregate(n=Count("pk"), value=PercentileCont(expression, (fraction,)))
        return Measurement(row["value"][0] if row["value"] else None, row["n"], start, end)
    tasks = _tasks(project, spec, start, end)
    if source == "error":
        row = tasks.aggregate(n=Count("pk"), bad=Count("pk", filter=Q(status__in=Task.FAILED_STATUSES)))
        return Measurement(_rate(row["bad"], row["n"]), row["n"], start, end)
    # Low-confidence findings are guesses: they raise no alert and count in no wasted time.
    findings = Finding.objects.counted().filter(project=project, task_started_at__gte=start, task_started_at__lt=end)
    if spec.finding_kind:
        findings = findings.filter(kind=spec.finding_kind)
    if any(spec.filters.get(key) for key in (*TASK_FILTERS, *STEP_FILTERS)):
        findings = findings.filter(task__in=tasks.values("pk"))
    if source == "finding":
        total = tasks.count()
        flagged = findings.values("task_id").distinct().count()
        return Measurement(_rate(flagged, total), total, start, end)
    # wasted: the findings' wasted time over the time of the tasks they belong to.
    row = tasks.filter(duration_ms__isnull=False).aggregate(n=Count("pk"), total=Sum("duration_ms"))
    wasted = findings.aggregate(total=Sum("wasted_ms"))["total"] or 0.0
    value = 100.0 * wasted / row["total"] if row["total"] else None
    return Measurement(value, row["n"], start, end)


def series(*, project: Project, spec: MetricSpec, end: datetime, points: int,
           step: timedelta) -> list[Measurement]:
    """The metric over consecutive windows of length `step` ending at `end`, oldest first: the
    chart of a rule and the live preview of the form. `points` queries, each one window."""
    out = []
    for i in range(points, 0, -1):
        window_end = end - step * (i - 1)
        out.append(measure(project=project, spec=spec, start=window_end - step, end=window_end))
    return out
