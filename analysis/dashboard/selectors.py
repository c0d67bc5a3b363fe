"""Reads: every selector takes the project first. The API, the pages and the exports all read
through these, so a filter means the same thing everywhere."""

from __future__ import annotations

from collections import defaultdict, namedtuple
from collections.abc import Sequence

from django.db.models import Q, QuerySet

from agentops.db import read_connection
from analysis.filters import TaskFilters, decode_cursor, encode_cursor, task_queryset
from analysis.models import Finding, TaskAnalysis
from ingest.models import Project, Step, Task


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
    ' FROM "ingest_step" WHERE task_id = %s ORDER BY started_at, ended_at, step_id COLLATE "C"')
_StepJSON = namedtuple("_StepJSON", "step_id parent_step_id head tail")


def task_steps_json(*, task: Task) -> list[str]:
    """The task's steps in tree order as JSON objects (text) shaped like StepSerializer's output,
    depth included. Postgres writes each step's JSON (jsonb columns pass through as they are
    stored, timestamps formatted as DRF does) and Python only orders the rows: a 50,000-step task
    costs no Python object per field, no datetime and no JSON decode/encode round trip."""
    with read_connection().cursor() as cur:
        cur.execute(_STEP_JSON_SQL, [task.pk])
        rows = [_StepJSON._make(row) for row in cur.fetchall()]
    return [f'{step.head[:-1]}, "depth" : {depth}, {step.tail[1:]}'
            for step, depth in tree_order(rows, presorted=True)]


def task_steps_by_id(*, task: Task, step_ids: Sequence[str]) -> list[Step]:
    """These steps of the task (a page of its critical path, say), without their large fields."""
    return list(Step.objects.filter(task=task, step_id__in=list(step_ids)).only(
        "step_id", "kind", "name", "started_at", "duration_ms", "status", "model", "device", "tool_name", "ttft_ms"))


def task_findings(*, task: Task) -> list[Finding]:
    """The task's findings, most wasted time first; the low-confidence ones, which count in no
    total, after the others."""
    findings = Finding.objects.filter(task=task).order_by("-wasted_ms", "kind")
    return sorted(findings, key=lambda f: not f.is_counted)


def step_labels(*, task: Task, step_ids: set[str]) -> dict[str, str]:
    """step id → what the step is called (tool, else name, else model) for those of the task."""
    rows = Step.objects.filter(task=task, step_id__in=list(step_ids)).values_list("step_id", "tool_name", "name", "model")
    return {sid: tool or name or model or sid for sid, tool, name, model in rows} if step_ids else {}


def task_analysis(*, task: Task) -> TaskAnalysis | None:
    return TaskAnalysis.objects.filter(task=task).first()


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
