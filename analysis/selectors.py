"""Reads: every selector takes the project first. The API, the pages and the exports all read
through these, so a filter means the same thing everywhere."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from django.db.models import Exists, OuterRef, Q, QuerySet

from analysis.filters import TaskFilters, decode_cursor, encode_cursor
from analysis.models import Finding, TaskAnalysis
from ingest.models import Project, Step, Task


def task_queryset(*, project: Project, filters: TaskFilters) -> QuerySet[Task]:
    qs = Task.objects.filter(project=project, started_at__isnull=False)
    f = filters
    for field in ("release", "name", "status", "environment", "session_id"):
        value = getattr(f, field)
        if value:
            qs = qs.filter(**{field: value})
    if f.q:
        qs = qs.filter(Q(name__icontains=f.q) | Q(task_id=f.q))
    if f.min_duration_ms is not None:
        qs = qs.filter(duration_ms__gte=f.min_duration_ms)
    if f.max_duration_ms is not None:
        qs = qs.filter(duration_ms__lt=f.max_duration_ms)
    if f.since:
        qs = qs.filter(started_at__gte=f.since)
    if f.until:
        qs = qs.filter(started_at__lt=f.until)
    if f.finding:
        qs = qs.filter(analysis__finding_kinds__contains=[f.finding])
    if f.device:
        qs = qs.filter(Exists(Step.objects.filter(task=OuterRef("pk"), device=f.device)))
    return qs


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


def tree_order(steps: Sequence[Step]) -> list[tuple[Step, int]]:
    """Steps depth-first, children by start time, with their depth. Iterative: a 50,000-step
    task with a deep chain does not recurse. A step whose parent is unknown is a root."""
    ids = {s.step_id for s in steps}
    children: dict[str, list[Step]] = defaultdict(list)
    roots = []
    for s in steps:
        if s.parent_step_id and s.parent_step_id in ids and s.parent_step_id != s.step_id:
            children[s.parent_step_id].append(s)
        else:
            roots.append(s)
    key = lambda s: (s.started_at, s.ended_at, s.step_id)  # noqa: E731
    ordered: list[tuple[Step, int]] = []
    seen: set[str] = set()
    stack = [(s, 0) for s in sorted(roots, key=key, reverse=True)]
    while stack:
        step, depth = stack.pop()
        if step.step_id in seen:
            continue
        seen.add(step.step_id)
        ordered.append((step, depth))
        stack.extend((c, depth + 1) for c in sorted(children.get(step.step_id, ()), key=key, reverse=True))
    # Steps caught in a parent cycle are unreachable from a root: show them at the end.
    ordered.extend((s, 0) for s in sorted(steps, key=key) if s.step_id not in seen)
    return ordered


def task_get(*, project: Project, task_id: str) -> Task | None:
    return Task.objects.filter(project=project, task_id=task_id).select_related("analysis").first()


def task_steps(*, task: Task) -> list[tuple[Step, int]]:
    return tree_order(list(Step.objects.filter(task=task)))


def task_findings(*, task: Task) -> list[Finding]:
    return list(Finding.objects.filter(task=task).order_by("-wasted_ms", "kind"))


def task_analysis(*, task: Task) -> TaskAnalysis | None:
    return TaskAnalysis.objects.filter(task=task).first()


def finding_queryset(*, project: Project, kind: str = "", task_id: str = "", release: str = "",
                     since=None, until=None) -> QuerySet[Finding]:
    """Findings of a project, newest task first. The API, the pages, the CSV export and
    `evaluate_detection` all read findings through this."""
    qs = Finding.objects.filter(project=project).select_related("task")
    if kind:
        qs = qs.filter(kind=kind)
    if task_id:
        qs = qs.filter(task__task_id=task_id)
    if release:
        qs = qs.filter(release=release)
    if since:
        qs = qs.filter(task_started_at__gte=since)
    if until:
        qs = qs.filter(task_started_at__lt=until)
    return qs.order_by("-task_started_at", "-id")
