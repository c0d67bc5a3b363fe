"""Rows the pages, the API and the exports show: the project's releases, environments and devices,
the task list, one task (its steps in tree order, waterfall rows, device lane, findings,
analysis), findings and the rows of the CSV exports. Every selector takes the project (or a task
of it) first and builds on `task_queryset`, so a filter means the same thing everywhere. The
aggregations behind the overview, latency and devices pages (percentiles, series, histograms)
are in aggregates.py."""

from __future__ import annotations

from collections import defaultdict, namedtuple
from collections.abc import Iterable, Sequence
from datetime import timedelta

from django.db.models import Q, QuerySet

from agentops.db import read_connection
from analysis.dashboard.charts import LANE_METRICS, SamplePoint, StepRow
from analysis.filters import TaskFilters, decode_cursor, encode_cursor, task_queryset
from analysis.models import Finding, TaskAnalysis
from analysis.units import fmt_ms
from ingest.models import Device, Project, Release, ResourceSample, Step, Task

# --- the project --------------------------------------------------------------------------------


def project_releases(*, project: Project) -> list[str]:
    return list(Release.objects.filter(project=project).order_by("-last_seen").values_list("name", flat=True)[:200])


def project_environments(*, project: Project) -> list[str]:
    """Environments seen in the latest tasks: an index scan, not a DISTINCT over millions."""
    with read_connection().cursor() as cur:
        cur.execute(
            "SELECT DISTINCT environment FROM (SELECT environment FROM ingest_task WHERE project_id = %s"
            " AND started_at IS NOT NULL ORDER BY started_at DESC LIMIT 5000) recent WHERE environment <> ''"
            " ORDER BY environment", [project.pk])
        return [row[0] for row in cur.fetchall()]


def project_devices(*, project: Project) -> list[Device]:
    return list(Device.objects.filter(project=project).order_by("vendor", "name"))


def finding_kinds() -> list[str]:
    """Every kind a detector can raise (the detector registry), for the finding filter."""
    from analysis.engine.detectors.base import all_detectors

    return sorted(all_detectors())


def project_has_data(*, project: Project) -> bool:
    return Task.objects.filter(project=project).exists()


# --- tasks -----------------------------------------------------------------------------------


def task_list(*, project: Project, filters: TaskFilters, limit: int = 50, cursor: str = "",
              sort: str = "-started_at") -> tuple[list[Task], str | None]:
    """One page of tasks, keyset-paginated on (sort column, id): as fast on page 10,000 as on
    page 1. Returns the tasks (with `analysis` joined) and the cursor of the next page."""
    field = sort.lstrip("-")
    descending = sort.startswith("-")
    qs = task_queryset(project=project, filters=filters).select_related("analysis")
    if field == "duration_ms":
        qs = qs.filter(duration_ms__isnull=False)
    if cursor:
        value, pk = decode_cursor(cursor, sort=sort)
        op = "lt" if descending else "gt"
        qs = qs.filter(Q(**{f"{field}__{op}": value}) | Q(**{field: value, f"pk__{op}": pk}))
    order = [f"-{field}", "-pk"] if descending else [field, "pk"]
    rows = list(qs.order_by(*order)[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        next_cursor = encode_cursor(getattr(last, field), last.pk)
    return rows, next_cursor


COUNT_CAP = 10_000


def task_count(*, project: Project, filters: TaskFilters, cap: int = COUNT_CAP) -> tuple[int, bool]:
    """How many tasks the filters match, counted up to `cap` (True: more than that): the list's
    result count costs at most `cap` index entries, however many tasks match."""
    n = task_queryset(project=project, filters=filters).values("pk")[: cap + 1].count()  # COUNT over a LIMIT
    return min(n, cap), n > cap


def tree_order(steps: Sequence[Step], *, presorted: bool = False) -> list[tuple[Step, int]]:
    """Steps depth-first, children by start time, with their depth. Iterative: a 50,000-step
    task with a deep chain does not recurse. A step whose parent is unknown is a root.
    `presorted`: the steps already come ordered by (started_at, ended_at, step_id), e.g. from
    SQL, so siblings keep that order without a sort (the waterfall's hot path)."""
    ids = {s.step_id for s in steps}
    children: dict[str, list[Step]] = defaultdict(list)
    roots = []
    for s in steps:
        if s.parent_step_id and s.parent_step_id in ids and s.parent_step_id != s.step_id:
            children[s.parent_step_id].append(s)
        else:
            roots.append(s)
    key = lambda s: (s.started_at, s.ended_at, s.step_id)  # noqa: E731

    def newest_first(items):  # step ids are unique, so keys never tie: reversed == reverse sort
        return items[::-1] if presorted else sorted(items, key=key, reverse=True)

    ordered: list[tuple[Step, int]] = []
    seen: set[str] = set()
    stack = [(s, 0) for s in newest_first(roots)]
    while stack:
        step, depth = stack.pop()
        if step.step_id in seen:
            continue
        seen.add(step.step_id)
        ordered.append((step, depth))
        kids = children.get(step.step_id)
        if kids:  # most steps are leaves: skip the sort and the list for them
            stack.extend([(c, depth + 1) for c in newest_first(kids)])
    # Steps caught in a parent cycle are unreachable from a root: show them at the end.
    if len(ordered) < len(steps):
        ordered.extend((s, 0) for s in (steps if presorted else sorted(steps, key=key)) if s.step_id not in seen)
    return ordered


def task_get(*, project: Project, task_id: str) -> Task | None:
    return Task.objects.filter(project=project, task_id=task_id).select_related("analysis").first()


def _iso_sql(column: str) -> str:
    """A timestamptz column as DRF writes a datetime: ISO 8601 in UTC with "Z", microseconds
    only when there are any (like datetime.isoformat)."""
    utc = f"{column} AT TIME ZONE 'UTC'"
    return (f"to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN date_part('microseconds', {column})::int"
            f" %% 1000000 = 0 THEN '' ELSE to_char({utc}, '.US') END || 'Z'")


# StepSerializer's fields after step_id, parent_step_id and depth, in its order.
_STEP_JSON_FIELDS = ("kind", "name", "started_at", "ended_at", "duration_ms", "status", "error", "depends_on",
                     "model", "provider", "device", "input_tokens", "output_tokens", "cached_tokens", "ttft_ms",
                     "streamed", "tool_name", "tool_args", "tool_result", "tool_call_id", "tool_call_ids",
                     "attributes", "events")
_STEP_JSON_SQL = (
    "SELECT step_id, parent_step_id, json_build_object('step_id', step_id, 'parent_step_id', parent_step_id)::text,"
    " json_build_object(" + ", ".join(
        f"'{f}', {_iso_sql(f) if f.endswith('_at') else f}" for f in _STEP_JSON_FIELDS) + ")::text"
    ' FROM "ingest_step" WHERE project_id = %s AND task_id = %s ORDER BY started_at, ended_at, step_id COLLATE "C"')
_StepJSON = namedtuple("_StepJSON", "step_id parent_step_id head tail")


def task_steps_json(*, task: Task) -> list[str]:
    """The task's steps in tree order as JSON objects (text) shaped like StepSerializer's output,
    depth included. Postgres writes each step's JSON (jsonb columns pass through as they are
    stored, timestamps formatted as DRF does) and Python only orders the rows: a 50,000-step task
    costs no Python object per field, no datetime and no JSON decode/encode round trip."""
    with read_connection().cursor() as cur:
        cur.execute(_STEP_JSON_SQL, [task.project_id, task.pk])
        rows = [_StepJSON._make(row) for row in cur.fetchall()]
    return [f'{step.head[:-1]}, "depth" : {depth}, {step.tail[1:]}'
            for step, depth in tree_order(rows, presorted=True)]


def task_steps_by_id(*, task: Task, step_ids: Sequence[str]) -> list[Step]:
    """These steps of the task (a page of its critical path, say), without their large fields."""
    return list(Step.objects.filter(project_id=task.project_id, task=task, step_id__in=list(step_ids)).only(
        "step_id", "kind", "name", "started_at", "duration_ms", "status", "model", "device", "tool_name", "ttft_ms"))


def task_findings(*, task: Task) -> list[Finding]:
    """The task's findings, most wasted time first; the low-confidence ones, which count in no
    total, after the others."""
    findings = list(Finding.objects.filter(project_id=task.project_id, task=task).order_by("-wasted_ms", "kind"))
    for f in findings:  # the API's task_id reads f.task: no lookup of the task by its id alone
        f.task = task
    return sorted(findings, key=lambda f: not f.is_counted)


def step_labels(*, task: Task, step_ids: set[str]) -> dict[str, str]:
    """step id → what the step is called (tool, else name, else model) for those of the task."""
    rows = Step.objects.filter(project_id=task.project_id, task=task, step_id__in=list(step_ids)).values_list("step_id", "tool_name", "name", "model")
    return {sid: tool or name or model or sid for sid, tool, name, model in rows} if step_ids else {}


def task_analysis(*, task: Task) -> TaskAnalysis | None:
    return TaskAnalysis.objects.filter(project_id=task.project_id, task=task).first()


def finding_queryset(*, project: Project, kind: str = "", task_id: str = "", release: str = "",
                     since=None, until=None, confidence: Sequence[str] = ()) -> QuerySet[Finding]:
    """Findings of a project, newest task first. The API, the pages, the CSV export and
    `evaluate_detection` all read findings through this. `confidence`: any of these levels."""
    qs = Finding.objects.filter(project=project).select_related("task")
    if kind:
        qs = qs.filter(kind=kind)
    if confidence:
        qs = qs.filter(confidence__in=list(confidence))
    if task_id:
        qs = qs.filter(task__task_id=task_id)
    if release:
        qs = qs.filter(release=release)
    if since:
        qs = qs.filter(task_started_at__gte=since)
    if until:
        qs = qs.filter(task_started_at__lt=until)
    return qs.order_by("-task_started_at", "-id")


def finding_page(*, project: Project, kind: str = "", task_id: str = "", release: str = "", since=None,
                 until=None, confidence: Sequence[str] = (), limit: int = 50,
                 cursor: str = "") -> tuple[list[Finding], str | None]:
    """One page of `finding_queryset`, keyset-paginated on (task_started_at, id) descending."""
    qs = finding_queryset(project=project, kind=kind, task_id=task_id, release=release, since=since,
                          until=until, confidence=confidence).filter(task_started_at__isnull=False)
    if cursor:
        value, pk = decode_cursor(cursor, sort="-started_at")
        qs = qs.filter(Q(task_started_at__lt=value) | Q(task_started_at=value, pk__lt=pk))
    rows = list(qs[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor(rows[-1].task_started_at, rows[-1].pk)
    return rows, next_cursor


# --- the task page ---------------------------------------------------------------------------


LANE_PAD = timedelta(seconds=30)


WHATIF_SCENARIOS = [("parallel_ms", "independent calls run in parallel"),
                    ("cached_ms", "repeated tool calls cached"),
                    ("parallel_cached_ms", "both: parallel and cached")]


def whatif_rows(whatif: object) -> list[tuple[str, float, float | None]]:
    """The what-if projection (analysis/engine/whatif.py) as table rows: (scenario, projected ms,
    ms saved against the task as it ran). Unknown `<name>_ms` keys are shown under their name,
    so a new scenario appears without a change here."""
    if not isinstance(whatif, dict) or not isinstance(whatif.get("actual_ms"), (int, float)):
        return []
    actual = float(whatif["actual_ms"])
    rows: list[tuple[str, float, float | None]] = [("critical path as it ran", actual, None)]
    known = {"actual_ms", "llm_path_ms", "unknown_hardware_ms", "hardware"} | {k for k, _ in WHATIF_SCENARIOS}
    scenarios = WHATIF_SCENARIOS + [(k, k.removesuffix("_ms").replace("_", " ")) for k in whatif
                                    if k.endswith("_ms") and k not in known]
    for key, label in scenarios:
        value = whatif.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append((label, float(value), actual - float(value)))
    unknown = whatif.get("unknown_hardware_ms")
    unknown = float(unknown) if isinstance(unknown, (int, float)) and not isinstance(unknown, bool) else 0.0
    for family, projection in sorted((whatif.get("hardware") or {}).items()):
        if not isinstance(projection, dict):
            continue
        notes = []
        already = projection.get("already_ms")
        if isinstance(already, (int, float)) and already > 0:
            notes.append(f"{fmt_ms(already)} of it already ran there")
        if unknown > 0:
            notes.append(f"hypothetical for {fmt_ms(unknown)} of it, on hardware no device named (a hosted API)")
        note = f" ({'; '.join(notes)})" if notes else ""
        for key, label in (("ms", f"LLM calls on {family}{note}"), ("with_fixes_ms", f"on {family}, with both fixes")):
            value = projection.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows.append((label, float(value), actual - float(value)))
    return rows


_ROWS_CACHE: dict[tuple, list[StepRow]] = {}


def task_waterfall_rows(*, task: Task) -> list[StepRow]:
    """The task's steps in tree order as StepRows. One round trip reading only the columns the
    waterfall draws, straight into StepRow's field order, times already as ms since the task
    started, tool arguments and errors cut to 200 characters in SQL: a 50,000-step task costs
    a few hundred milliseconds, not seconds. The last few tasks stay cached in the process,
    keyed on their last event, so expanding and collapsing subtrees does not read them again."""
    key = (task.pk, task.last_event_at, task.step_count)
    if key in _ROWS_CACHE:
        return _ROWS_CACHE[key]
    with read_connection().cursor() as cur:
        cur.execute(
            "SELECT step_id, parent_step_id, 0, kind, name,"
            " (extract(epoch FROM started_at - %s) * 1000)::float8, duration_ms, status, model, device,"
            " ttft_ms, input_tokens, output_tokens, tool_name, coalesce(left(tool_args::text, 200), ''),"
            " left(error, 200) FROM ingest_step WHERE project_id = %s AND task_id = %s"
            ' ORDER BY started_at, ended_at, step_id COLLATE "C"', [task.started_at, task.project_id, task.pk])
        steps = [StepRow._make(row) for row in cur.fetchall()]
    # _make on a spliced tuple: NamedTuple._replace costs several times more at 50,000 rows
    rows = [StepRow._make(step[:2] + (depth,) + step[3:]) if depth else step
            for step, depth in tree_order(steps, presorted=True)]
    _ROWS_CACHE[key] = rows
    while len(_ROWS_CACHE) > 4:
        _ROWS_CACHE.pop(next(iter(_ROWS_CACHE)))
    return rows


def task_lane_samples(*, task: Task, devices: Iterable[str]) -> list[SamplePoint]:
    """Samples of the task's devices from shortly before it started to shortly after it ended,
    as ms since the task started (the waterfall's axis)."""
    devices = sorted(set(d for d in devices if d))
    if not devices or task.started_at is None:
        return []
    end = task.ended_at or task.started_at
    metrics = [m for m, _ in LANE_METRICS]
    qs = (ResourceSample.objects.filter(project_id=task.project_id, device__in=devices,
                                        ts__gte=task.started_at - LANE_PAD, ts__lte=end + LANE_PAD)
          .order_by("device", "ts").values_list("device", "ts", *metrics)[:20000])
    return [SamplePoint(row[0], round((row[1] - task.started_at).total_seconds() * 1000, 3),
                        dict(zip(metrics, row[2:], strict=True)))
            for row in qs]


def task_findings_by_step(findings: Iterable[Finding]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per step, "kind: summary" of the findings that count, and of the low-confidence ones
    (with why we are not sure), which the waterfall draws dimmed."""
    counted: dict[str, list[str]] = defaultdict(list)
    possible: dict[str, list[str]] = defaultdict(list)
    for f in findings:
        why = f" — {f.confidence_reason}" if f.confidence_reason and not f.is_counted else ""
        text = f"{f.kind}: {f.summary}{why}"
        for step_id in f.step_ids:
            (counted if f.is_counted else possible)[step_id].append(text)
    return counted, possible


def step_detail(*, task: Task, step_id: str) -> Step | None:
    return Step.objects.filter(project_id=task.project_id, task=task, step_id=step_id).first()


# --- findings of the filtered tasks, exports --------------------------------------------------


_FINDING_OWN_FILTERS = {"release", "since", "until"}


def filtered_findings(*, project: Project, filters: TaskFilters) -> QuerySet[Finding]:
    """Findings of the tasks the dashboard filters select (the pages' totals read these). Findings carry their task's release and start, so the
    common filters need no join with the tasks table."""
    if {k for k, v in vars(filters).items() if v not in (None, "")} <= _FINDING_OWN_FILTERS:
        qs = Finding.objects.filter(project=project, task_started_at__isnull=False)
        if filters.release:
            qs = qs.filter(release=filters.release)
        if filters.since:
            qs = qs.filter(task_started_at__gte=filters.since)
        if filters.until:
            qs = qs.filter(task_started_at__lt=filters.until)
        return qs
    tasks = task_queryset(project=project, filters=filters)
    return Finding.objects.filter(project=project, task__in=tasks.values("pk"))


def tasks_for_export(*, project: Project, filters: TaskFilters, sort: str = "-started_at"):
    field = sort.lstrip("-")
    order = [sort, "-pk" if sort.startswith("-") else "pk"]
    qs = task_queryset(project=project, filters=filters).select_related("analysis")
    if field == "duration_ms":
        qs = qs.filter(duration_ms__isnull=False)
    return qs.order_by(*order).iterator(chunk_size=2000)


def findings_for_export(*, project: Project, filters: TaskFilters):
    qs = filtered_findings(project=project, filters=filters).select_related("task")
    if filters.finding:
        qs = qs.filter(kind=filters.finding)
    return qs.order_by("-task_started_at", "-id").iterator(chunk_size=2000)
