"""The MCP tools: each one a thin call of the selectors the dashboard pages use, its answer shaped
for a model's context. Plain synchronous functions of the caller's project and the tool's
arguments (server.py exposes every public function of TOOLS with its signature minus `project`).

What every answer holds: the rows (text cut to TEXT_CHARS, step-id lists to IDS_SHOWN), the
dashboard page that shows the same thing (`url`: AGENTOPS_BASE_URL + the page's path, built by
the page's own route so ids travel as id-safe segments, ingest/ids.py), and `more`: the cursor of
the next page when there is one. Whatever the rows hold, an answer is at most OUTPUT_CHARS
characters of JSON: a page that would be longer loses its last rows and says `more` instead.
A bad argument raises ToolInputError naming it (the assistant sees it as a tool error), and an
id the project does not have is "no such task", whether or not another project has it."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Literal
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse
from pydantic import Field

from analysis.comparison import diff
from analysis.dashboard import aggregates, selectors, sessions
from analysis.engine.detectors.base import all_detectors
from analysis.filters import (
    FilterError,
    TaskFilters,
    encode_cursor,
    parse_task_filters,
    task_is_running,
)
from analysis.models import Finding
from analysis.releases.compare import (
    UnknownRelease,
    parse_threshold,
    release_compare,
    release_names,
)
from analysis.releases.scope import parse_compare_filters
from ingest.models import Project, Task

OUTPUT_CHARS = 16_000   # ~4,000 tokens: room for several answers in one conversation
TEXT_CHARS = 300        # a name, summary or headline; trace text is the user's, often long
IDS_SHOWN = 10          # step ids listed per finding or diff item (the count says how many)
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_ID_CHARS = 128      # ingest.limits.MAX_ID_LENGTH: no stored id is longer


class ToolInputError(ValueError):
    """A bad argument or an id the project does not have; the message says which and why."""


# --- arguments -------------------------------------------------------------------------------

TaskId = Annotated[str, Field(description="a task id of this project (as search_tasks lists them)",
                              min_length=1, max_length=MAX_ID_CHARS)]
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description=f"rows per page (1-{MAX_LIMIT})")]
Cursor = Annotated[str, Field(max_length=400, description="`more` of the previous answer, for the next page")]
Text = Annotated[str, Field(max_length=400)]
Since = Annotated[str, Field(max_length=64, description="tasks started at or after this RFC 3339 time")]
Until = Annotated[str, Field(max_length=64, description="tasks started before this RFC 3339 time")]
Range = Annotated[str, Field(max_length=8, description="the last 15m, 1h, 6h, 24h, 7d or 30d (when no `since`)")]
Ms = Annotated[float | None, Field(ge=0, description="milliseconds")]
LatencyGroup = Literal["task", "kind", "name", "tool", "model", "device", "session"]  # the Latency page's
TaskSort = Literal["-started_at", "started_at", "-duration_ms", "duration_ms"]  # analysis.filters.SORTS


def _filters(**params) -> TaskFilters:
    try:
        return parse_task_filters(_query(params))
    except FilterError as exc:
        raise ToolInputError(str(exc)) from None


def _query(params: dict) -> dict[str, str]:
    """Arguments as the pages' query parameters: set ones only, as text."""
    out = {}
    for key, value in params.items():
        if value is None or value == "" or value is False:
            continue
        out[key] = "1" if value is True else f"{value:g}" if isinstance(value, float) else str(value)
    return out


def _task(project: Project, task_id: str) -> Task:
    task = selectors.task_get(project=project, task_id=task_id) if "\x00" not in task_id else None
    if task is None:
        raise ToolInputError(f"task_id: no such task {_clip(task_id, 80)!r} in project {project.name!r}")
    return task


def _offset(cursor: str, tool: str) -> int:
    """The position an offset cursor of `tool` continues from (0 without one)."""
    if not cursor:
        return 0
    try:
        name, _, offset = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().partition(":")
        value = int(offset)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        value, name = -1, ""
    if name != tool or not 0 <= value <= 10_000_000:
        raise ToolInputError(f"cursor: not a cursor {tool} returned")
    return value


def _offset_cursor(tool: str, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{tool}:{offset}".encode()).decode().rstrip("=")


# --- output ----------------------------------------------------------------------------------

def _clip(value, n: int = TEXT_CHARS) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def _ms(value) -> float | None:
    return None if value is None else round(float(value), 1)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def _ids(ids) -> list[str]:
    return [_clip(i, MAX_ID_CHARS) for i in list(ids)[:IDS_SHOWN]]


def page_url(project: Project, route: str, *args: str, query: dict | None = None) -> str:
    """The dashboard page at `route` (a URL name of analysis/urls.py) for this project."""
    params = {**_query(query or {}), "project": project.name}
    return settings.AGENTOPS_BASE_URL.rstrip("/") + reverse(route, args=args) + "?" + urlencode(params)


def task_url(project: Project, task_id: str) -> str:
    return page_url(project, "task-detail", task_id)


def _dumps(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


def fit(data: dict, rows_key: str | None = None, cursor_after: Callable[[int], str] | None = None) -> str:
    """`data` as JSON text of at most OUTPUT_CHARS characters: the rows under `rows_key` that do
    not fit are left for the next page (`more` = cursor_after(number of rows kept))."""
    text = _dumps(data)
    rows = data.get(rows_key) if rows_key else None
    if len(text) <= OUTPUT_CHARS or not rows:
        return text if len(text) <= OUTPUT_CHARS else _dumps({"error": "the answer is too long; narrow the filters"})
    low, high = 0, len(rows)  # the most rows that fit: rows are similar in size, so bisect
    while low < high:
        mid = (low + high + 1) // 2
        data[rows_key] = rows[:mid]
        data["more"] = cursor_after(mid) if cursor_after else None
        if len(_dumps(data)) <= OUTPUT_CHARS:
            low = mid
        else:
            high = mid - 1
    data[rows_key] = rows[:low]
    data["more"] = cursor_after(low) if cursor_after and low < len(rows) else data.get("more")
    text = _dumps(data)
    return text if len(text) <= OUTPUT_CHARS else _dumps({"error": "the answer is too long; narrow the filters"})


def _task_row(project: Project, task: Task) -> dict:
    analysis = getattr(task, "analysis", None)  # None: not analysed (the accessor raises an AttributeError)
    return {"task_id": _clip(task.task_id, MAX_ID_CHARS), "name": _clip(task.name, 120),
            "release": _clip(task.release, 80), "environment": _clip(task.environment, 80),
            "session_id": _clip(task.session_id, 200), "status": task.status, "started_at": _time(task.started_at), "duration_ms": _ms(task.duration_ms),
            "steps": task.step_count, "top_finding": analysis.top_finding if analysis else "",
            "wasted_ms": _ms(analysis.wasted_ms) if analysis else None, "url": task_url(project, task.task_id)}


def _finding_row(finding: Finding, *, with_task: Project | None = None) -> dict:
    evidence = finding.evidence if isinstance(finding.evidence, dict) else {}
    row = {"kind": finding.kind, "wasted_ms": _ms(finding.wasted_ms), "severity": finding.severity,
           "confidence": finding.confidence, "counted": finding.is_counted, "summary": _clip(finding.summary),
           "step_ids": _ids(finding.step_ids), "steps": len(finding.step_ids)}
    if isinstance(evidence.get("verdict"), str):
        row["hardware_verdict"] = _clip(evidence["verdict"], 40)
    if with_task is not None:
        row.update({"task_id": _clip(finding.task.task_id, MAX_ID_CHARS), "task_name": _clip(finding.task.name, 120),
                    "release": _clip(finding.release, 80), "task_started_at": _time(finding.task_started_at),
                    "url": task_url(with_task, finding.task.task_id)})
    return row


def _diff(payload: dict) -> dict:
    """diff.diff_payload (rows=False) cut to what a model reads: the headline and the items."""
    if not payload.get("available"):
        return {"available": False, "reason": _clip(payload.get("reason"))}
    typical = payload.get("typical") or {}
    items = payload.get("items") or []
    return {
        "available": True, "running": payload.get("running", False), "headline": _clip(payload.get("headline"), 600),
        "task_ms": _ms(payload.get("task_ms")), "other_ms": _ms(payload.get("other_ms")),
        "difference_ms": _ms(payload.get("difference_ms")),
        "compared_with": {k: typical.get(k) for k in ("task_id", "name", "release", "scope", "runs", "duration_ms",
                                                       "turns", "calls") if k in typical},
        "items": [{"kind": i["kind"], "ms": _ms(i["ms"]), "text": _clip(i["text"]), "verdict": i.get("verdict", ""),
                   "step_ids": _ids(i["step_ids"]), "steps": len(i["step_ids"]),
                   "other_step_ids": _ids(i["other_step_ids"])} for i in items[:MAX_LIMIT]],
        "items_total": len(items),
    }


# --- the tools -------------------------------------------------------------------------------

def search_tasks(
    *, project: Project,
    q: Annotated[str, Field(max_length=200, description="free text: the task name contains it, the task id is it, "
                                                        "or a step's tool arguments or error hold its words")] = "",
    name: Annotated[str, Field(max_length=200, description="task name (exact)")] = "",
    release: Text = "", status: Annotated[str, Field(max_length=16, description="ok, error or timeout")] = "",
    environment: Text = "", session_id: Text = "",
    device: Annotated[str, Field(max_length=200, description="a step ran on this device")] = "",
    finding: Annotated[str, Field(max_length=40, description="has a finding of this kind, e.g. slow_step")] = "",
    model: Annotated[str, Field(max_length=200, description="a step used this model: exact, or * as a wildcard "
                                                            "(gpt-4*, *mini*)")] = "",
    tool: Annotated[str, Field(max_length=200, description="a step called this tool: exact, or * as a wildcard "
                                                           "(search_*, *inventory*)")] = "",
    attr: Annotated[str, Field(max_length=400, description="key:value of a step or task attribute, as the sender "
                                                           "sent it (gen_ai.tool.name:refund_policy)")] = "",
    error: Annotated[str, Field(max_length=200, description="words of a step's error")] = "",
    min_duration_ms: Ms = None, max_duration_ms: Ms = None,
    min_step_ms: Annotated[float | None, Field(ge=0, description="a work step at least this long, not the agent "
                                                                 "or framework span around others (with model, "
                                                                 "tool, error, attr: the same step)")] = None,
    step_kind: Annotated[str, Field(max_length=16, description="the kind of that step: llm, tool, retrieval, agent, "
                                                               "framework, queue or other")] = "",
    since: Since = "", until: Until = "", range: Range = "",  # noqa: A002 (the pages' parameter name)
    running: Annotated[bool, Field(description="only tasks whose steps are still arriving")] = False,
    sort: TaskSort = "-started_at", limit: Limit = DEFAULT_LIMIT, cursor: Cursor = "",
) -> str:
    """Find tasks (agent runs) with the Tasks page's filters and search, newest first by default.
    Each row has the task's duration, status, top finding and wasted time; pass a task_id to
    explain_task, critical_path or compare_tasks."""
    params = dict(q=q, name=name, release=release, status=status, environment=environment, session_id=session_id,
                  device=device, finding=finding, model=model, tool=tool, attr=attr, error=error,
                  min_duration_ms=min_duration_ms, max_duration_ms=max_duration_ms, min_step_ms=min_step_ms,
                  step_kind=step_kind, since=since, until=until, range=range, running=running)
    filters = _filters(**params)
    try:
        tasks, next_cursor = selectors.task_list(project=project, filters=filters, limit=limit, cursor=cursor,
                                                 sort=sort)
    except FilterError as exc:
        raise ToolInputError(str(exc)) from None
    field = sort.lstrip("-")
    data = {"project": project.name, "tasks": [_task_row(project, t) for t in tasks], "more": next_cursor,
            "url": page_url(project, "tasks", query={**params, "sort": sort if sort != "-started_at" else ""})}
    return fit(data, "tasks", lambda n: encode_cursor(getattr(tasks[n - 1], field), tasks[n - 1].pk))


def explain_task(*, project: Project, task_id: TaskId) -> str:
    """Why this task took as long as it did: how it differs from the typical run of the same
    task name and release (itemised deltas that add up to the difference, largest first, each with
    its hardware verdict), its findings with the time each wasted, and its latency budget."""
    task = _task(project, task_id)
    analysis = selectors.task_analysis(task=task)
    findings = selectors.task_findings(task=task)
    running = task_is_running(task)
    typical = (_diff(diff.diff_payload(project=project, task=task, against="typical", rows=False)) if not running
               else {"available": False, "reason": "the task is still running"})
    data = {
        "project": project.name, "task": _task_row(project, task), "typical_run": typical,
        "findings": [_finding_row(f) for f in findings[:MAX_LIMIT]], "findings_total": len(findings),
        "findings_counted": sum(f.is_counted for f in findings),
        "wasted_ms": _ms(analysis.wasted_ms) if analysis else None,
        "budget_ms": {k: _ms(v) for k, v in sorted((analysis.budget or {}).items())} if analysis else {},
        "analyzed": analysis is not None and analysis.analyzed_at is not None,
        "url": task_url(project, task.task_id),
        "compare_url": page_url(project, "task-compare", task.task_id, query={"against": "typical"}),
    }
    return fit(data, "findings")


def compare_tasks(*, project: Project, task_id: TaskId,
                  other_task_id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS,
                                                      description="the task to compare with")]) -> str:
    """What made one task slower (or faster) than another task of this project: the steps
    aligned turn by turn and the itemised deltas that add up to the difference."""
    task = _task(project, task_id)
    other = _task(project, other_task_id)
    try:
        payload = diff.diff_payload(project=project, task=task, against=other.task_id, rows=False)
    except LookupError:
        raise ToolInputError(f"other_task_id: no such task {_clip(other_task_id, 80)!r}") from None
    data = {"project": project.name, "task": _task_row(project, task), "other": _task_row(project, other),
            "diff": _diff(payload),
            "url": page_url(project, "task-compare", task.task_id, query={"against": other.task_id})}
    return fit(data)


def critical_path(*, project: Project, task_id: TaskId, limit: Limit = 50, cursor: Cursor = "") -> str:
    """The chain of steps that determined when the task ended (in time order), with the latency
    budget (ms per category: prefill, decode, tool, retrieval, queue, framework) and the what-if
    projections (parallelised calls, cached repeats, other hardware)."""
    task = _task(project, task_id)
    analysis = selectors.task_analysis(task=task)
    path = list(analysis.critical_path) if analysis else []
    offset = _offset(cursor, "critical_path")
    page = path[offset: offset + limit]
    steps = {s.step_id: s for s in selectors.task_steps_by_id(task=task, step_ids=page)}
    rows = []
    for step_id in page:
        step = steps.get(step_id)
        row = {"step_id": _clip(step_id, MAX_ID_CHARS)}
        if step is not None:
            row.update({"kind": step.kind, "name": _clip(step.name, 120),
                        "start_ms": _ms((step.started_at - task.started_at).total_seconds() * 1000),
                        "duration_ms": _ms(step.duration_ms), "status": step.status})
            for field in ("model", "device", "tool_name"):
                if getattr(step, field):
                    row[field] = _clip(getattr(step, field), 120)
            if step.ttft_ms is not None:
                row["ttft_ms"] = _ms(step.ttft_ms)
        rows.append(row)
    end = offset + len(page)
    data = {"project": project.name, "task": _task_row(project, task),
            "analyzed": analysis is not None and analysis.analyzed_at is not None,
            "path_steps": len(path), "offset": offset, "steps": rows,
            "more": _offset_cursor("critical_path", end) if end < len(path) else None,
            "budget_ms": {k: _ms(v) for k, v in sorted((analysis.budget or {}).items())} if analysis else {},
            "whatif": [{"scenario": label, "ms": _ms(ms), "saved_ms": _ms(saved)}
                       for label, ms, saved in selectors.whatif_rows(analysis.whatif if analysis else {})][:20],
            "url": task_url(project, task.task_id)}
    return fit(data, "steps", lambda n: _offset_cursor("critical_path", offset + n))


def latency_percentiles(
    *, project: Project,
    group_by: Annotated[LatencyGroup, Field(description="task: task durations only; kind, name, tool, model, "
                                                        "device: step durations per group; session: time per "
                                                        "user turn per session")] = "kind",
    release: Text = "", name: Annotated[str, Field(max_length=200, description="task name")] = "",
    environment: Text = "", status: Annotated[str, Field(max_length=16, description="ok, error or timeout")] = "",
    device: Text = "", model: Text = "", tool: Text = "",
    since: Since = "", until: Until = "", range: Range = "",  # noqa: A002
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="groups (busiest first)")] = 30,
) -> str:
    """Latency percentiles as the Latency page shows them: count, p50, p90, p95, p99 and max
    (ms) of task durations, and of step durations per group (or time per turn per session)."""
    params = dict(release=release, name=name, environment=environment, status=status, device=device, model=model,
                  tool=tool, since=since, until=until, range=range)
    filters = _filters(**params)
    tasks = aggregates.duration_percentiles(project=project, filters=filters)
    if group_by == "session":
        groups = sessions.session_percentiles(project=project, filters=filters, limit=limit)
    elif group_by != "task":
        groups = aggregates.duration_percentiles(project=project, filters=filters, group_by=group_by, limit=limit)
    else:
        groups = []

    def row(r: dict) -> dict:
        return {"group": _clip(r["group"], 200), "count": r["count"],
                **{k: _ms(r[k]) for k in ("p50", "p90", "p95", "p99", "max")}}

    data = {"project": project.name, "group_by": group_by, "tasks": row(tasks[0]) if tasks else None,
            "groups": [row(r) for r in groups], "url": page_url(project, "latency",
                                                                query={**params, "group_by": group_by})}
    return fit(data, "groups")


def list_findings(
    *, project: Project,
    kind: Annotated[str, Field(max_length=40, description="slow_step, repeated_tool_call, serial_gap, "
                                                          "parallelizable_calls, context_growth, "
                                                          "hardware_queueing, hardware_throttling, ...")] = "",
    task_id: Annotated[str, Field(max_length=MAX_ID_CHARS, description="findings of this task only")] = "",
    release: Text = "",
    confidence: Annotated[str, Field(max_length=40, description="high, medium or low, or a comma-separated "
                                                                "list of them")] = "",
    since: Since = "", until: Until = "", limit: Limit = DEFAULT_LIMIT, cursor: Cursor = "",
) -> str:
    """Findings (what the analysis flagged, with the time each wasted), newest task first. Low
    confidence findings are possible, not proven: they count in no total (`counted` false)."""
    if kind and kind not in all_detectors():
        raise ToolInputError(f"kind: must be one of {', '.join(sorted(all_detectors()))}")
    levels = [v.strip() for v in confidence.split(",") if v.strip()]
    if any(v not in Finding.CONFIDENCES for v in levels):
        raise ToolInputError(f"confidence: must be one of {', '.join(Finding.CONFIDENCES)}, or a comma-separated list")
    filters = _filters(since=since, until=until)
    try:
        findings, next_cursor = selectors.finding_page(
            project=project, kind=kind, task_id=task_id, release=release, since=filters.since, until=filters.until,
            confidence=levels, limit=limit, cursor=cursor)
    except FilterError as exc:
        raise ToolInputError(str(exc)) from None
    page = (page_url(project, "tasks", query={"finding": kind, "release": release, "since": since, "until": until})
            if kind else page_url(project, "overview", query={"release": release, "since": since, "until": until}))
    data = {"project": project.name, "findings": [_finding_row(f, with_task=project) for f in findings],
            "more": next_cursor, "url": page}
    return fit(data, "findings",
               lambda n: encode_cursor(findings[n - 1].task_started_at, findings[n - 1].pk))


def compare_releases(
    *, project: Project,
    a: Annotated[str, Field(max_length=200, description="the baseline release")],
    b: Annotated[str, Field(max_length=200, description="the candidate release")],
    name: Annotated[str, Field(max_length=200, description="task name")] = "",
    environment: Text = "", device: Text = "",
    vendor: Annotated[str, Field(max_length=50, description="device vendor")] = "",
    since: Since = "", until: Until = "", range: Range = "",  # noqa: A002
    threshold_pct: Annotated[float | None, Field(ge=0, le=10_000, description="smallest p95 increase called a "
                                                                              "regression (default 10)")] = None,
    alpha: Annotated[float | None, Field(gt=0, lt=1, description="significance level (default 0.05)")] = None,
) -> str:
    """Did release b make tasks faster or slower than release a: p50/p90/p95/p99 per task name
    with confidence intervals and p-values, whether it regressed, and where the time changed
    (the attribution to steps, tools and models, finding rates, the latency budget)."""
    params = _query(dict(name=name, environment=environment, device=device, vendor=vendor, since=since,
                         until=until, range=range, threshold_pct=threshold_pct, alpha=alpha))
    a, b = a.strip(), b.strip()
    try:
        if not a or not b:
            raise FilterError(f"{'a' if not a else 'b'}: required (the name of a release)")
        filters = parse_compare_filters(params)
        threshold, level = parse_threshold(params)
        report = release_compare(project=project, a=a, b=b, filters=filters, threshold_pct=threshold,
                                 alpha=level).report
    except UnknownRelease as exc:
        names = ", ".join(_clip(n, 60) for n in release_names(project=project)[:20])
        raise ToolInputError(f"{exc}; the project's releases: {names or 'none'}") from None
    except FilterError as exc:
        raise ToolInputError(str(exc)) from None
    attribution = report["attribution"]

    def change(row: dict) -> dict:
        return {"name": _clip(row["name"], 120) if row["name"] is not None else None, "n_a": row["n_a"],
                "n_b": row["n_b"], "label": row["label"], "verdict": _clip(row["verdict"]),
                "regressed": row["regressed"], "p_value": row["p_value"],
                "percentiles": [{k: (_ms(p[k]) if k.endswith("_ms") else p[k]) for k in
                                 ("q", "a_ms", "b_ms", "delta_ms", "delta_pct", "ci_low_ms", "ci_high_ms")}
                                for p in row["percentiles"]], "warnings": [_clip(w) for w in row["warnings"][:3]]}

    def contribution(row: dict) -> dict:
        return {"key": _clip(row["key"], 160), "significant": row["significant"],
                "contribution_ms": _ms(row["contribution_ms"]), "mean_a_ms": _ms(row["mean_a_ms"]),
                "mean_b_ms": _ms(row["mean_b_ms"]), "p50_a_ms": _ms(row["p50_a_ms"]), "p50_b_ms": _ms(row["p50_b_ms"]),
                "calls_per_task_a": row["calls_per_task_a"], "calls_per_task_b": row["calls_per_task_b"]}

    data = {
        "project": project.name, "a": a, "b": b, "regressed": report["regressed"],
        "overall": change(report["overall"]),
        "slower_steps": [{**s, "key": _clip(s["key"], 160)} for s in report["slower_steps"][:10]],
        "where_it_changed": {
            "mean_delta_ms": _ms(attribution["mean_delta_ms"]), "mix_ms": _ms(attribution.get("mix_ms")),
            "method": attribution["method"], "sample": attribution["sample"],
            **{dim: [contribution(r) for r in attribution[dim][:8]] for dim in ("steps", "tools", "models", "kinds")},
        },
        "findings": [{"kind": f["kind"], "rate_a": f["rate_a"], "rate_b": f["rate_b"],
                      "delta_wasted_ms": _ms(f["delta_wasted_ms"]), "summary": _clip(f["summary"])}
                     for f in report["findings"][:10]],
        "budget": [{k: (_ms(v) if k.endswith("_ms") else v) for k, v in r.items()} for r in report["budget"]],
        "tasks": [change(r) for r in report["tasks"][:MAX_LIMIT]], "tasks_total": len(report["tasks"]),
        "url": page_url(project, "release-compare", query={"a": a, "b": b, **params}),
    }
    return fit(data, "tasks")


def get_session(*, project: Project,
                session_id: Annotated[str, Field(min_length=1, max_length=200, description="a session id")],
                limit: Limit = 50, cursor: Cursor = "") -> str:
    """One session (the tasks sharing a session id, one per user turn) in order: how long the
    user waited for each answer, the time between turns, and each turn's findings."""
    turns = sessions.session_detail(project=project, session_id=session_id) if "\x00" not in session_id else []
    if not turns:
        raise ToolInputError(f"session_id: no such session {_clip(session_id, 80)!r} in project {project.name!r}")
    offset = _offset(cursor, "get_session")
    page = turns[offset: offset + limit]
    waited = [t.waited_ms for t in turns if t.waited_ms is not None]
    rows = [{"turn": t.number, **_task_row(project, t.task), "waited_ms": _ms(t.waited_ms),
             "since_previous_ms": _ms(t.since_previous_ms), "running": t.running,
             "findings": [{"kind": f.kind, "wasted_ms": _ms(f.wasted_ms), "counted": f.is_counted,
                           "summary": _clip(f.summary, 160)} for f in t.findings[:5]]} for t in page]
    end = offset + len(page)
    data = {"project": project.name, "session_id": _clip(session_id, 200), "turns_total": len(turns),
            "waited_ms": _ms(sum(waited)), "slowest_ms": _ms(max(waited, default=None)), "turns": rows,
            "more": _offset_cursor("get_session", end) if end < len(turns) else None,
            "url": page_url(project, "session-detail", session_id)}
    return fit(data, "turns", lambda n: _offset_cursor("get_session", offset + n))


def device_status(
    *, project: Project,
    vendor: Annotated[str, Field(max_length=50, description="dmatrix, groq, nvidia, ...")] = "",
    device: Annotated[str, Field(max_length=200, description="one device")] = "",
    release: Text = "", environment: Text = "", since: Since = "", until: Until = "", range: Range = "",  # noqa: A002
    limit: Limit = 30,
) -> str:
    """The inference devices as the Devices page shows them: per device the LLM steps it served,
    TTFT and TPOT (ms per output token) p50/p95, and its hardware findings; then the hardware
    findings with the most wasted time (queueing, throttling) and their verdicts."""
    params = dict(release=release, environment=environment, since=since, until=until, range=range)
    filters = _filters(**params)
    rows = aggregates.device_table(project=project, filters=filters, vendor=vendor, device=device)
    findings = aggregates.hardware_findings(project=project, filters=filters, limit=10)
    data = {"project": project.name,
            "devices": [{"device": _clip(r["device"], 200), "vendor": _clip(r["vendor"], 50),
                         "hardware": _clip(r["hardware"], 100), "steps": r["steps"],
                         **{k: _ms(r[k]) for k in ("ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95")},
                         "hardware_findings": r["hardware_findings"]} for r in rows[:limit]],
            "devices_total": len(rows),
            "hardware_findings": [_finding_row(f, with_task=project) for f in findings],
            "url": page_url(project, "devices", query={**params, "vendor": vendor, "device": device})}
    return fit(data, "devices")


TOOLS = [search_tasks, explain_task, compare_tasks, critical_path, latency_percentiles, list_findings,
         compare_releases, get_session, device_status]
