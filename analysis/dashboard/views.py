"""Dashboard pages, their chart JSON and the CSV exports: short functions that call selectors
(`analysis.dashboard.selectors`, `analysis.dashboard.aggregates`) and render.

Every view requires a login and resolves the project through `analysis.access`: a project the
user may not see is a 404, whatever its name. Filters live in the URL (the same parameters as
the read API), so every view is linkable and a bad value answers 400 naming the parameter.
Pages render containers; `static/js/<page>.js` fetches the chart JSON and draws it.
"""

from __future__ import annotations

import csv
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.gzip import gzip_page

from analysis import costs
from analysis.access import project_for_user
from analysis.comparison import diff
from analysis.dashboard import (
    aggregates,
    charts,
    devices,
    export_slots,
    remedies,
    selectors,
    sessions,
    status,
)
from analysis.dashboard.exports import CSV_DANGEROUS
from analysis.dashboard.instrumentation import task_coverage
from analysis.dashboard.links import entity_url
from analysis.engine.serving import expand, related_devices
from analysis.filters import SORTS, FilterError, TaskFilters, parse_task_filters, task_is_running
from ingest.auth import bearer_token
from ingest.conventions import server_key
from ingest.models import IngestKey, Task
from ingest.records import STEP_KINDS
from ingest.services import key_authenticate

GLOBAL_PARAMS = ("project", "range", "since", "until", "release", "environment")
TASK_PARAMS = GLOBAL_PARAMS + ("name", "status", "q", "min_duration_ms", "max_duration_ms",
                               "finding", "device", "session_id", "attr", "model", "tool", "min_step_ms", "step_kind", "error",
                               "running")
LATENCY_GROUPS = ("task", "kind", "name", "tool", "model", "device", "session")
PAGE_SIZE = 50


# --- helpers ---------------------------------------------------------------------------------


def keep(params, keys=TASK_PARAMS, **override) -> dict[str, str]:
    """The query parameters among `keys` that are set, with overrides (None removes)."""
    out = {k: params.get(k) for k in keys if params.get(k)}
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = str(value)
    return out


def _project(request):
    """The project of this request; Http404 for a project the user may not see. None when the
    user has no project at all (the page then explains how to get one). A request with a read
    key (the chart JSON, for agentops.client) sees the key's project only."""
    name = request.GET.get("project")
    key = getattr(request, "read_key", None)
    if key is not None:
        if name and name != key.project.name:
            raise Http404("no such project")
        return key.project
    project = project_for_user(request.user, name)
    if project is None and name:
        raise Http404("no such project")
    return project


def _scope(request) -> tuple[object, TaskFilters | None, str]:
    project = _project(request)
    try:
        return project, parse_task_filters(request.GET), ""
    except FilterError as exc:
        return project, None, str(exc)


def _page(request, template: str, project, error: str = "", **context):
    context.update({
        "project": project, "error": error,
        "global_query": urlencode(keep(request.GET, GLOBAL_PARAMS)),
        "has_data": project is not None and selectors.project_has_data(project=project),
        "ingest_endpoint": request.build_absolute_uri("/"),
    })
    return render(request, template, context, status=400 if error else 200)


def _behind(project) -> str:
    """"findings are N minutes behind" when analysis lags ingest (analysis/dashboard/status.py), else ""."""
    return status.behind_text(status.cached_analysis_lag(project=project)["lag_seconds"]) if project else ""


def _json_scope(request):
    project = _project(request)
    if project is None:
        raise Http404("no project")
    try:
        return project, parse_task_filters(request.GET)
    except FilterError as exc:
        raise _BadRequest(str(exc)) from None


class _BadRequest(Exception):
    pass


def _json_view(func):
    """login (or a key with the read scope: agentops.client's figures) + gzip + bad filters →
    400 {"error": ...} for the chart JSON endpoints."""
    @gzip_page
    def wrapper(request, *args, **kwargs):
        if bearer_token(request) is not None:
            key = key_authenticate(plaintext=bearer_token(request))
            if key is None:
                return JsonResponse({"error": "unknown or revoked key"}, status=401)
            if IngestKey.SCOPE_READ not in key.scopes:
                return JsonResponse({"error": "this key has no 'read' scope"}, status=403)
            request.read_key = key
        elif not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        try:
            return JsonResponse(func(request, *args, **kwargs))
        except _BadRequest as exc:
            return JsonResponse({"error": str(exc)}, status=400)
    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper


def _task_or_404(project, task_id: str):
    task = selectors.task_get(project=project, task_id=task_id) if project else None
    if task is None:
        raise Http404("no such task")
    return task


# --- overview --------------------------------------------------------------------------------


def _culprits(request, *, project, filters) -> dict:
    """The overview's "where the time goes": the slowest agents, the tools, models and devices
    holding the most critical-path time and the biggest regressions, each with the query of its
    filtered task list."""
    params = keep(request.GET)

    def tasks(**narrow) -> str:
        return urlencode({**params, **narrow, "sort": "-duration_ms"})

    by_agent = aggregates.agent_summaries(project=project, filters=filters)
    agents = aggregates.slowest_agents(project=project, filters=filters, summaries=by_agent)
    for r in agents:
        r["query"] = tasks(name=r["name"])
        r["tail_query"] = tasks(name=r["name"], min_duration_ms=r["p95"])
    critical = aggregates.critical_path_time(project=project, filters=filters)
    for dimension in ("tool", "model", "device"):
        for r in critical[dimension]:
            r["query"] = tasks(**{dimension: r["name"]})
    found = aggregates.regressions(project=project, filters=filters, summaries=by_agent)
    for r in found:
        r["query"] = tasks(**{"name" if r["what"] == "agent" else r["what"]: r["name"]})
    return {"agents": agents, "critical": critical, "regressions": found,
            "compared": filters.since is not None, "limit": aggregates.CRITICAL_PATH_TASKS,
            "threshold": aggregates.REGRESSION_PCT, "minimum": aggregates.REGRESSION_MIN}


@login_required
def overview(request):
    project, filters, error = _scope(request)
    totals = culprits = None
    if project and filters:
        totals = aggregates.overview_totals(project=project, filters=filters)
        culprits = _culprits(request, project=project, filters=filters)
    culprit_tables = [(d, label, culprits["critical"][d]) for d, label in
                      (("tool", "Tool"), ("model", "Model"), ("device", "Device"))] if culprits else []
    return _page(request, "analysis/overview.html", project, error, totals=totals, culprits=culprits,
                 culprit_tables=culprit_tables,
                 behind=_behind(project),
                 sessions_query=urlencode(keep(request.GET, GLOBAL_PARAMS)),
                 tasks_query=urlencode(keep(request.GET)),
                 config={"charts": reverse("overview-charts") + "?" + urlencode(keep(request.GET)),
                         "cost": reverse("overview-cost") + "?" + urlencode(keep(request.GET)),
                         "turn_time": reverse("turn-time") + "?" + urlencode(keep(request.GET)),
                         "tasks": reverse("tasks"), "params": keep(request.GET)})


@_json_view
def overview_cost(request):
    """Token cost of the filtered tasks, in total and per release, as display text. Fetched by the
    page after it renders: it sums every LLM step in range (seconds at millions of steps)."""
    project, filters = _json_scope(request)
    rows = sorted(costs.cost_by_release(project=project, filters=filters).items())
    total = costs.combined(row["cost"] for _, row in rows)
    tasks = sum(row["tasks"] for _, row in rows)
    return {
        "total": total.text, "title": total.missing_text,
        "per_task": costs.format_usd(total.per(tasks)) if total.usd is not None else "",
        "releases": [{"release": release or "–", "tasks": row["tasks"], "cost": row["cost"].text,
                      "title": row["cost"].missing_text,
                      "per_task": costs.format_usd(row["per_task"]) if row["cost"].llm_steps else "–",
                      "per_llm_step": costs.format_usd(row["per_llm_step"]) if row["cost"].llm_steps else "–"}
                     for release, row in rows] if total.llm_steps else [],
    }


@_json_view
def overview_charts(request):
    project, filters = _json_scope(request)
    series = aggregates.overview_series(project=project, filters=filters)
    return {
        "volume": charts.volume_figure(series),
        "errors": charts.error_rate_figure(series),
        "percentiles": charts.percentile_figure(series),
        "findings": charts.top_findings_figure(aggregates.top_findings(project=project, filters=filters)),
        "budget": charts.budget_figure(aggregates.budget_by_release(project=project, filters=filters),
                                       title="Latency budget: mean time per task, by release"),
    }


# --- tasks -----------------------------------------------------------------------------------


@login_required
def task_list(request):
    project, filters, error = _scope(request)
    sort = request.GET.get("sort", "-started_at")
    if sort not in SORTS:
        error = error or f"sort: must be one of {', '.join(sorted(SORTS))}"
    tasks, next_cursor, count_text = [], None, ""
    if project and not error:
        try:
            tasks, next_cursor = selectors.task_list(project=project, filters=filters, limit=PAGE_SIZE,
                                                     cursor=request.GET.get("cursor", ""), sort=sort)
            count, more = selectors.task_count(project=project, filters=filters)
            count_text = f"more than {count:,} tasks" if more else f"{count:,} task{'' if count == 1 else 's'}"
            found = costs.task_costs(tasks=tasks)
            for t in tasks:
                t.cost = found[t.pk]
                t.running = task_is_running(t)
        except FilterError as exc:
            error = str(exc)
    params = keep(request.GET, TASK_PARAMS + ("sort",))
    return _page(
        request, "analysis/tasks.html", project, error, tasks=tasks, sort=sort, count_text=count_text,
        step_kinds=STEP_KINDS,
        config={"values": reverse("api-search-values") + (f"?{urlencode({'project': project.name})}" if project else "")},
        next_query=urlencode({**params, "cursor": next_cursor}) if next_cursor else "",
        first_query=urlencode(params) if request.GET.get("cursor") else "",
        sort_started_query=urlencode({**keep(request.GET), "sort": "started_at" if sort == "-started_at" else "-started_at"}),
        sort_duration_query=urlencode({**keep(request.GET), "sort": "duration_ms" if sort == "-duration_ms" else "-duration_ms"}),
        export_query=urlencode(params), hidden=keep(request.GET, GLOBAL_PARAMS),
        values=params, statuses=Task.STATUSES, finding_kinds=selectors.finding_kinds(),
        devices=selectors.project_devices(project=project) if project else [],
    )


@login_required
def task_detail(request, task_id: str):
    project = _project(request)
    task = _task_or_404(project, task_id)
    analysis = selectors.task_analysis(task=task)
    findings = selectors.task_findings(task=task)
    device_urls = devices.finding_device_urls(keep(request.GET, GLOBAL_PARAMS), task=task, findings=findings)
    labels = selectors.step_labels(task=task, step_ids={s for f in findings for s in f.step_ids})
    for f in findings:  # a hardware finding links to its server's charts at that moment
        f.device_url = device_urls.get(f.pk, "")
        f.remedy = remedies.remedy(f.kind, f.evidence, f.wasted_ms, counted=f.is_counted, labels=labels,
                                   step_ids=f.step_ids)
    base = reverse("task-detail", args=[task.task_id])
    session_tasks, session_cost = (costs.session_cost(project=project, session_id=task.session_id)
                                   if task.session_id else (0, None))
    running = task_is_running(task)
    typical = None if running else diff.diff_payload(project=project, task=task, against="typical", rows=False)
    return _page(request, "analysis/task_detail.html", project, task=task, analysis=analysis,
                 running=running, typical=typical, behind=_behind(project), webgl=task.step_count > charts.BAR_LIMIT,
                 cost=costs.task_cost(task=task), session_tasks=session_tasks, session_cost=session_cost,
                 findings=remedies.grouped(findings), possible_findings=any(not f.is_counted for f in findings),
                 findings_counted=sum(f.is_counted for f in findings),
                 coverage=task_coverage(task=task),
                 whatif=selectors.whatif_rows(analysis.whatif if analysis else {}),
                 budget=sorted((analysis.budget or {}).items()) if analysis else [],
                 config={"waterfall": base + "/waterfall.json?" + urlencode(keep(request.GET, ("project",))),
                         "step": base + "/steps/", "project": project.name,
                         "mode": request.GET.get("mode", ""), "steps": task.step_count, "running": running,
                         "live": base + "/live.json?" + urlencode(keep(request.GET, ("project",))),
                         "search": base + "/search.json?" + urlencode(keep(request.GET, ("project",)))})


@_json_view
def task_waterfall(request, task_id: str):
    """The waterfall figure; `mode` (all|top) and `toggle` (comma-separated step ids) say
    which subtrees are open."""
    project = _project(request)
    task = _task_or_404(project, task_id)
    mode = request.GET.get("mode") or None
    if mode not in (None, "all", "top"):
        raise _BadRequest("mode: must be all or top")
    toggled = [t for t in request.GET.get("toggle", "").split(",") if t][:500]
    rows = selectors.task_waterfall_rows(task=task)
    mode = mode or charts.default_mode(len(rows))
    if request.GET.get("reveal"):
        toggled = charts.reveal(rows, mode=mode, toggled=toggled, step_id=request.GET["reveal"])
    analysis = selectors.task_analysis(task=task)
    findings = selectors.task_findings(task=task)
    # The lane shows the calls' devices and those that describe them: a server's GPUs, a GPU's server.
    served = {r.device for r in rows if r.device}
    samples = selectors.task_lane_samples(task=task, devices=expand(served, related_devices(project.pk, served)))
    counted, possible = selectors.task_findings_by_step(findings)
    figure = charts.waterfall_figure(
        rows, critical_path=analysis.critical_path if analysis else [], mode=mode, toggled=toggled,
        findings=counted, possible=possible, samples=samples)
    has_children = {r.parent_step_id for r in rows if r.parent_step_id}
    budget = [("this task", analysis.budget)] if analysis and analysis.budget else []
    return {"waterfall": figure, "budget": charts.budget_figure(budget, title="", axis_title="time in this task"),
            "parents": sorted(has_children)}


@_json_view
def step_detail(request, task_id: str, step_id: str):
    """All stored fields of one step (rendered as text by the page)."""
    project = _project(request)
    task = _task_or_404(project, task_id)
    step = selectors.step_detail(task=task, step_id=step_id)
    if step is None:
        raise Http404("no such step")
    fields = ["step_id", "parent_step_id", "kind", "name", "started_at", "ended_at", "duration_ms",
              "status", "error", "depends_on", "model", "provider", "device", "input_tokens",
              "output_tokens", "cached_tokens", "ttft_ms", "streamed", "tool_name", "tool_args",
              "tool_result", "tool_call_id", "tool_call_ids", "attributes", "events"]
    out = {f: (getattr(step, f).isoformat() if f.endswith("_at") else getattr(step, f)) for f in fields}
    # For the step panel: the ids it copies and the pages its names lead to (never markup: the
    # page sets every value as text and every link as an href).
    attributes = step.attributes if isinstance(step.attributes, dict) else {}
    server = server_key(attributes, {}) if "server.address" in attributes else ""
    params = keep(request.GET, GLOBAL_PARAMS)
    # What the verdict reads besides the step's device: a server's GPUs or a GPU's server, by host
    # (docs/otlp.md, "Which server and GPU served a call").
    served_with = list(related_devices(task.project_id, {step.device}).get(step.device, ())) if step.device else []
    out.update(task_id=task.task_id, session_id=task.session_id, agent=task.name, server=server,
               served_with=served_with,
               offset_ms=(step.started_at - task.started_at).total_seconds() * 1000 if task.started_at else None)
    out["links"] = {
        "tool": entity_url("tool", step.tool_name, params), "model": entity_url("model", step.model, params),
        "agent": entity_url("agent", task.name, params), "session": entity_url("session", task.session_id, params),
        # the Devices page at that host around this step, its window shaded
        "device": devices.moment_url(params, device=step.device, start=step.started_at, end=step.ended_at)
        if step.device else "",
        "server": devices.moment_url(params, device=server, start=step.started_at, end=step.ended_at)
        if server else "",
        "served_with": [devices.moment_url(params, device=d, start=step.started_at, end=step.ended_at)
                        for d in served_with],
    }
    return out


# --- latency ---------------------------------------------------------------------------------


@login_required
def latency(request):
    project, filters, error = _scope(request)
    group_by = request.GET.get("group_by", "kind")
    if group_by not in LATENCY_GROUPS:
        error = error or f"group_by: must be one of {', '.join(LATENCY_GROUPS)}"
    task_rows, group_rows = [], []
    if project and not error:
        task_rows = aggregates.duration_percentiles(project=project, filters=filters)
        if group_by == "session":  # time per user turn, per session
            group_rows = sessions.session_percentiles(project=project, filters=filters)
        elif group_by != "task":
            group_rows = aggregates.duration_percentiles(project=project, filters=filters, group_by=group_by)
    params = keep(request.GET)
    chart_params = {**params, "group_by": group_by, **keep(request.GET, ("group",))}
    for r in group_rows:
        r["query"] = urlencode({**params, "group_by": group_by, "group": r["group"]})
        # Tasks filter by device, session, model and tool; a kind or step name has no task filter.
        key = {"device": "device", "session": "session_id", "model": "model", "tool": "tool"}.get(group_by)
        r["tasks_query"] = urlencode({**params, key: r["group"]}) if key and r["group"] else ""
    return _page(request, "analysis/latency.html", project, error, task_rows=task_rows,
                 group_rows=group_rows, group_by=group_by, groups=LATENCY_GROUPS,
                 group=request.GET.get("group", ""), hidden=keep(request.GET, TASK_PARAMS),
                 tail_queries={k: urlencode({**params, "min_duration_ms": charts.lower_bound_ms(task_rows[0][k]),
                                                 "sort": "-duration_ms"})
                               for k in ("p50", "p90", "p95", "p99", "max") if task_rows and task_rows[0][k] is not None},
                 all_groups_query=urlencode({**params, "group_by": group_by}),
                 config={"charts": reverse("latency-charts") + "?" + urlencode(chart_params),
                         "tasks": reverse("tasks"), "params": params})


@_json_view
def latency_charts(request):
    project, filters = _json_scope(request)
    group_by = request.GET.get("group_by", "kind")
    if group_by not in LATENCY_GROUPS:
        raise _BadRequest(f"group_by: must be one of {', '.join(LATENCY_GROUPS)}")
    group = request.GET.get("group", "")
    out = {
        "task_histogram": charts.histogram_figure(
            aggregates.duration_histogram(project=project, filters=filters), title="Task duration"),
        "task_ecdf": charts.ecdf_figure(aggregates.duration_quantiles(project=project, filters=filters),
                                        title="Task duration ECDF"),
    }
    if group_by == "session":
        found = sessions.session_charts(project=project, filters=filters, session_id=group)
        label = f"Time per user turn: session {group}" if group else "Time per user turn (all sessions)"
        out["group_histogram"] = charts.histogram_figure(found.histogram, title=label, clickable=False)
        out["group_ecdf"] = charts.ecdf_figure(found.ecdf, title="Time per user turn ECDF by session")
    elif group_by != "task":
        top = [r["group"] for r in aggregates.duration_percentiles(project=project, filters=filters,
                                                                  group_by=group_by, limit=8)]
        label = f"Step duration: {group_by} = {group}" if group else f"Step duration (all {group_by}s)"
        out["group_histogram"] = charts.histogram_figure(
            aggregates.duration_histogram(project=project, filters=filters, group_by=group_by, group=group),
            title=label, clickable=False)
        out["group_ecdf"] = charts.ecdf_figure(
            aggregates.duration_quantiles(project=project, filters=filters, group_by=group_by,
                                         groups=[group] if group else top),
            title=f"Step duration ECDF by {group_by}")
    return out


# --- exports ---------------------------------------------------------------------------------


def csv_cell(value) -> object:
    """A cell a spreadsheet will not run: text starting with = + - @ (or tab/CR) gets a '."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(CSV_DANGEROUS):
        return "'" + value
    return value


class _Echo:
    def write(self, value):
        return value


def _csv_response(filename: str, header: list[str], rows) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())

    def lines():
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([csv_cell(v) for v in row])

    try:
        slot = export_slots.take()
    except export_slots.Busy as busy:
        return HttpResponse(busy.message, status=503, headers=busy.headers,
                            content_type="text/plain; charset=utf-8")
    with slot:
        response = StreamingHttpResponse(slot.stream(lines()), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _export_scope(request):
    project = _project(request)
    if project is None:
        raise Http404("no project")
    try:
        return project, parse_task_filters(request.GET), ""
    except FilterError as exc:
        return project, None, str(exc)


@login_required
def tasks_csv(request):
    project, filters, error = _export_scope(request)
    sort = request.GET.get("sort", "-started_at")
    if sort not in SORTS:
        error = error or f"sort: must be one of {', '.join(sorted(SORTS))}"
    if error:
        return HttpResponse(error, status=400, content_type="text/plain; charset=utf-8")

    def rows():
        for t in selectors.tasks_for_export(project=project, filters=filters, sort=sort):
            analysis = getattr(t, "analysis", None) if hasattr(t, "analysis") else None
            yield [t.task_id, t.name, t.release, t.environment, t.started_at.isoformat() if t.started_at else "",
                   t.duration_ms, t.status, t.step_count, t.input_tokens, t.output_tokens,
                   analysis.top_finding if analysis else "", analysis.wasted_ms if analysis else ""]

    return _csv_response(f"{project.name}-tasks.csv",
                         ["task_id", "name", "release", "environment", "started_at", "duration_ms", "status",
                          "steps", "input_tokens", "output_tokens", "top_finding", "wasted_ms"], rows())


@login_required
def findings_csv(request):
    project, filters, error = _export_scope(request)
    if error:
        return HttpResponse(error, status=400, content_type="text/plain; charset=utf-8")

    def rows():
        for f in selectors.findings_for_export(project=project, filters=filters):
            yield [f.task.task_id, f.task.name, f.release, f.task_started_at.isoformat() if f.task_started_at else "",
                   f.kind, f.severity, f.confidence, f.confidence_reason, f.wasted_ms, " ".join(f.step_ids),
                   f.summary]

    return _csv_response(f"{project.name}-findings.csv",
                         ["task_id", "task_name", "release", "task_started_at", "kind", "severity", "confidence",
                          "confidence_reason", "wasted_ms", "step_ids", "summary"], rows())
