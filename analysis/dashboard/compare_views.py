"""Pages of the comparisons, sessions and in-task search: short functions over
analysis/comparison/diff.py and analysis/dashboard/sessions.py, with the conventions of analysis/dashboard/views.py
(login, the project from the URL, a bad parameter answers 400 naming it, filters in the URL)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import redirect
from django.urls import reverse

from analysis import rollups
from analysis.comparison import diff
from analysis.dashboard import compare_charts, selectors, sessions
from analysis.dashboard.charts import BAR_LIMIT
from analysis.dashboard.views import (
    GLOBAL_PARAMS,
    TASK_PARAMS,
    _BadRequest,
    _json_scope,
    _json_view,
    _page,
    _project,
    _scope,
    _task_or_404,
    keep,
)
from analysis.filters import FilterError, parse_task_filters, task_is_running
from analysis.units import fmt_ms
from ingest.models import Step, Task

SESSION_PAGE_SIZE = 50
STEP_MATCHES = 500


@login_required
def compare_pick(request):
    """The task list's "Compare the two ticked tasks": /compare?task=A&task=B."""
    if _project(request) is None:  # a project the user may not see: 404 before anything else
        raise Http404("no project")
    picked = [t for t in request.GET.getlist("task") if t][:3]
    if len(picked) != 2:
        return HttpResponseBadRequest("task: tick exactly two tasks to compare", content_type="text/plain")
    query = urlencode({**keep(request.GET, GLOBAL_PARAMS), "against": picked[1]})
    return redirect(reverse("task-compare", args=[picked[0]]) + "?" + query)


@login_required
def task_compare(request, task_id: str):
    project = _project(request)
    task = _task_or_404(project, task_id)
    against = request.GET.get("against", "").strip()
    error = ""
    other = None
    if not against:
        error = "against: the id of the task to compare with"
    elif against != "typical":
        other = selectors.task_get(project=project, task_id=against)
        if other is None:
            raise Http404("no such task")
    data = None if error else diff.diff_payload(project=project, task=task, against=against, rows=False)
    global_query = urlencode(keep(request.GET, GLOBAL_PARAMS))
    return _page(request, "analysis/task_compare.html", project, error, task=task, other=other, diff=data,
                 against=against, task_query=global_query,
                 # the aligned rows are at most both tasks' steps (the typical run's: about this task's)
                 webgl=task.step_count + (other.step_count if other else task.step_count) > BAR_LIMIT,
                 config={"compare": reverse("task-compare-json", args=[task.task_id]) + "?" + urlencode(
                     {**keep(request.GET, ("project",)), "against": against}),
                     "task_url": reverse("task-detail", args=[task.task_id]),
                     "other_url": reverse("task-detail", args=[other.task_id]) if other else "",
                     "query": global_query})


@_json_view
def task_compare_json(request, task_id: str):
    project = _project(request)
    task = _task_or_404(project, task_id)
    against = request.GET.get("against", "").strip()
    if not against or "\x00" in against:
        raise _BadRequest("against: typical or a task id")
    try:
        explanation = diff.task_diff(project=project, task=task, against=against)
    except diff.DiffError as exc:
        raise _BadRequest(f"against: {exc}") from None
    except LookupError:
        raise Http404("no such task") from None
    other = explanation.typical.task_id or "typical run"
    return {"figure": compare_charts.compare_figure(explanation.rows, other_name=other),
            "headline": explanation.headline, "items": [i.as_dict() for i in explanation.items]}


@_json_view
def task_live(request, task_id: str):
    """What a running task's page polls: is it still running, and how many steps so far."""
    project = _project(request)
    task = _task_or_404(project, task_id)
    return {"running": task_is_running(task), "steps": task.step_count,
            "last_event_at": task.last_event_at.isoformat(), "status": task.status,
            "duration_ms": task.duration_ms}


@_json_view
def task_step_search(request, task_id: str):
    """Steps of one task whose name, tool, model, device, attributes, arguments or error contain
    `q` (case-insensitive), in time order: the task page's find box."""
    project = _project(request)
    task = _task_or_404(project, task_id)
    text = request.GET.get("q", "").strip()
    if not text:
        raise _BadRequest("q: the text to find")
    if "\x00" in text or len(text) > 200:
        raise _BadRequest("q: at most 200 characters, no NUL")
    needle = Q()
    for field in ("name", "tool_name", "model", "device", "error", "step_id"):
        needle |= Q(**{f"{field}__icontains": text})
    key, sep, value = text.partition(":")
    if sep and key.strip():  # key:value finds an attribute
        needle |= Q(attributes__contains={key.strip(): value.strip()})
    # Attributes and arguments as JSON text: the text anywhere in them.
    pattern = f"%{_like(text)}%"
    needle |= Q(RawSQL("(attributes::text ILIKE %s OR coalesce(tool_args::text, '') ILIKE %s)", [pattern, pattern],
                       output_field=BooleanField()))
    found = list(Step.objects.filter(project_id=task.project_id, task=task).filter(needle).order_by("started_at", "step_id")
                 .values_list("step_id", flat=True)[: STEP_MATCHES + 1])
    return {"q": text, "step_ids": found[:STEP_MATCHES], "truncated": len(found) > STEP_MATCHES}


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@_json_view
def turn_time_json(request):
    """The overview's time per user turn, fetched after the page renders (a scan of the range's
    turns). Numbers formatted here; the page sets them as text."""
    project, filters = _json_scope(request)
    found = sessions.turn_time(project=project, filters=filters)
    return {"sessions": found["sessions"], "turns": found["turns"],
            "text": {"sessions": str(found["sessions"]),
                     "turns_per_session": "–" if found["turns_per_session"] is None else f"{found['turns_per_session']:g}",
                     **{k: "–" if found[k] is None else f"≈{fmt_ms(found[k])}" for k in ("p50", "p95", "p99")}},
            "approximate": rollups.APPROXIMATE_NOTE}


@login_required
def session_list(request):
    project, filters, error = _scope(request)
    sort = request.GET.get("sort", "-last_started")
    rows, next_cursor = [], None
    if project and not error:
        try:
            rows, next_cursor = sessions.session_list(project=project, filters=filters, sort=sort,
                                                      limit=SESSION_PAGE_SIZE, cursor=request.GET.get("cursor", ""))
        except FilterError as exc:
            error = str(exc)
    params = keep(request.GET, TASK_PARAMS + ("sort",))

    def sort_query(field):
        return urlencode({**keep(request.GET), "sort": field if sort == f"-{field}" else f"-{field}"})

    return _page(request, "analysis/session_list.html", project, error, rows=rows, sort=sort,
                 next_query=urlencode({**params, "cursor": next_cursor}) if next_cursor else "",
                 first_query=urlencode(params) if request.GET.get("cursor") else "",
                 sort_queries={f: sort_query(f) for f in ("last_started", "turns", "total_ms", "slowest_ms")},
                 hidden=keep(request.GET, GLOBAL_PARAMS), values=params, statuses=Task.STATUSES,
                 detail_query=urlencode(keep(request.GET, GLOBAL_PARAMS)))


@login_required
def session_detail(request, session_id: str):
    project = _project(request)
    if project is None:
        raise Http404("no project")
    try:
        filters = parse_task_filters({k: v for k, v in request.GET.items() if k in ("release", "environment")})
    except FilterError as exc:
        return _page(request, "analysis/session_detail.html", project, str(exc), session_id=session_id, turns=[])
    turns = sessions.session_detail(project=project, session_id=session_id, filters=filters)
    if not turns:
        raise Http404("no such session")
    waited = [t.waited_ms for t in turns if t.waited_ms is not None]
    return _page(request, "analysis/session_detail.html", project, session_id=session_id, turns=turns,
                 total_ms=sum(waited), slowest_ms=max(waited, default=None),
                 task_query=urlencode(keep(request.GET, GLOBAL_PARAMS)),
                 figure=compare_charts.session_figure(turns),
                 config={"task_url": reverse("tasks"), "query": urlencode(keep(request.GET, GLOBAL_PARAMS))})
