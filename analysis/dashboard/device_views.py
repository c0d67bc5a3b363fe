"""The servers and devices page (`/devices`) and its chart JSON (`/charts/devices.json`): short
functions over analysis/dashboard/devices.py. Parameters beyond the global filters: `vendor`,
`device` (a server or GPU: its host's devices), `hosts` (page of hosts), `vpage` (page of
verdict groups), `mark_from`/`mark_to` (a window shaded on every chart: the incident a link
came from)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.urls import reverse

from analysis.dashboard import aggregates, device_charts, devices, selectors
from analysis.dashboard.charts import ecdf_figure
from analysis.dashboard.views import (
    GLOBAL_PARAMS,
    TASK_PARAMS,
    _BadRequest,
    _json_scope,
    _json_view,
    _page,
    _scope,
    keep,
)
from analysis.filters import FilterError, TaskFilters
from ingest.models import Project

PAGE_PARAMS = ("vendor", "device", "hosts", "vpage", "mark_from", "mark_to")
_TIME_PARAMS = ("range", "since", "until")


def _page_number(params, key: str) -> int:
    value = params.get(key, "") or "1"
    if not value.isdigit() or int(value) < 1:
        raise FilterError(f"{key}: must be a page number (1, 2, …)")
    return int(value)


def _instant(params, key: str) -> datetime | None:
    value = params.get(key, "")
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{key}: {value!r} is not an RFC 3339 timestamp") from None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _mark(params) -> tuple[datetime, datetime] | None:
    lo, hi = _instant(params, "mark_from"), _instant(params, "mark_to")
    return (lo, hi) if lo and hi and lo <= hi else None


def _groups_page(request, project: Project):
    """(every device, the host groups selected, this page of them, page number, pages)."""
    all_devices = selectors.project_devices(project=project)
    groups = devices.selected_groups(devices.host_groups(all_devices), vendor=request.GET.get("vendor", ""),
                                     device=request.GET.get("device", ""))
    page = _page_number(request.GET, "hosts")
    pages = max(1, -(-len(groups) // devices.HOSTS_PER_PAGE))
    page = min(page, pages)
    shown = groups[(page - 1) * devices.HOSTS_PER_PAGE: page * devices.HOSTS_PER_PAGE]
    return all_devices, groups, shown, page, pages


def _pager(request, key: str, page: int, pages: int) -> dict:
    params = keep(request.GET, TASK_PARAMS + PAGE_PARAMS)
    return {"page": page, "pages": pages,
            "previous": urlencode({**params, key: page - 1}) if page > 1 else "",
            "next": urlencode({**params, key: page + 1}) if page < pages else ""}


@login_required
def devices_page(request):
    project, filters, error = _scope(request)
    context: dict = {"vendor": request.GET.get("vendor", ""), "device": request.GET.get("device", ""),
                     "hidden": keep(request.GET, GLOBAL_PARAMS)}
    if project and not error:
        try:
            context.update(_page_context(request, project, filters))
        except FilterError as exc:
            error = str(exc)
    return _page(request, "analysis/devices.html", project, error, **context)


def _page_context(request, project: Project, filters: TaskFilters) -> dict:
    all_devices, groups, shown, page, pages = _groups_page(request, project)
    _mark(request.GET)  # a bad mark is a 400 here, not a broken chart later
    colors = devices.device_colors(all_devices)
    labels = {d.name: devices.device_label(d.name) for d in all_devices}
    selected = request.GET.get("vendor") or request.GET.get("device")
    names = [n for g in groups for n in g.names]
    vpage = _page_number(request.GET, "vpage")
    verdicts, totals = devices.verdict_groups(project=project, filters=filters, devices=names if selected else None,
                                              limit=devices.GROUPS_PER_PAGE,
                                              offset=(vpage - 1) * devices.GROUPS_PER_PAGE)
    counts = totals["per_device"]
    step_filters = devices.page_filters(filters)
    # One read of the step rollups serves the table and the ECDFs.
    summaries = aggregates.device_summaries(project=project, filters=step_filters, devices=[d.name for d in all_devices])
    stats = {r["device"]: r for r in aggregates.device_table(project=project, filters=step_filters, hardware=counts,
                                                        summaries=summaries)}
    global_params = keep(request.GET, GLOBAL_PARAMS)
    tasks_base = {k: v for k, v in global_params.items() if k not in _TIME_PARAMS}
    verdict_rows = [{
        "group": v, "text": v.text,
        "chart_url": devices.moment_url(global_params, device=v.device, start=v.start, end=v.end),
        # the tasks of the group: started from its first task to its last (inclusive)
        "tasks_url": reverse("tasks") + "?" + urlencode({
            **tasks_base, "finding": v.kind, "device": v.device, "since": v.first_task_at.isoformat(),
            "until": (v.last_task_at + timedelta(milliseconds=1)).isoformat()}),
        "worst_url": reverse("task-detail", args=[v.worst_task]) + ("?" + urlencode(global_params) if global_params else ""),
    } for v in verdicts]
    host_rows = [{"group": g, "devices": [{
        "device": d, "color": colors.get(d.name), "label": labels[d.name],
        "stats": stats.get(d.name, {}), "hardware": counts.get(d.name, 0),
        "tasks_query": urlencode({**keep(request.GET), "device": d.name}),
    } for d in g.devices]} for g in shown]
    servers = [d.name for g in shown for d in g.servers]
    serving = devices.serving_breakdown(project=project, filters=filters, servers=servers)
    serving_rows = [{"row": r, "color": colors.get(r.server), "label": labels[r.server]} for r in serving]
    params = keep(request.GET, TASK_PARAMS + PAGE_PARAMS)
    params.update(hosts=str(page), parts="telemetry")
    return {
        "verdicts": verdict_rows, "totals": totals, "vpager": _pager(request, "vpage", vpage,
                                                                      max(1, -(-totals["groups"] // devices.GROUPS_PER_PAGE))),
        "hosts": host_rows, "hpager": _pager(request, "hosts", page, pages), "host_count": len(groups),
        "gpu_count": sum(len(g.gpus) for g in groups), "server_count": sum(len(g.servers) for g in groups),
        "serving": serving_rows, "serving_window": devices.SERVING_WINDOW,
        "vendors": sorted({d.vendor for d in all_devices if d.vendor}), "all_devices": all_devices,
        # The figures made from what the page read already come with it; the telemetry is fetched.
        "config": {"charts": reverse("devices-charts") + "?" + urlencode(params),
                   "figures": {"serving": device_charts.serving_figure(serving, colors=colors, labels=labels),
                               **_ecdfs(project, step_filters, servers, colors, labels, summaries)}},
    }


CHART_PARTS = ("telemetry", "serving", "ttft", "tpot")


@_json_view
def devices_charts(request):
    """The page's charts for the same hosts page: telemetry small multiples, the server-side
    breakdown, TTFT and TPOT ECDFs of its servers; `parts` names a subset (the page fetches only
    the telemetry: it renders the others from what it read)."""
    project, filters = _json_scope(request)
    parts = [p for p in request.GET.get("parts", "").split(",") if p] or list(CHART_PARTS)
    if set(parts) - set(CHART_PARTS):
        raise _BadRequest(f"parts: must be among {', '.join(CHART_PARTS)}")
    try:
        all_devices, _, shown, _, _ = _groups_page(request, project)
        mark = _mark(request.GET)
    except FilterError as exc:
        raise _BadRequest(str(exc)) from None
    colors = devices.device_colors(all_devices)
    labels = {d.name: devices.device_label(d.name) for d in all_devices}
    servers = [d.name for g in shown for d in g.servers]
    out = {}
    if "telemetry" in parts:
        buckets, width = devices.telemetry(project=project, filters=filters, devices=[n for g in shown for n in g.names])
        out["telemetry"] = device_charts.telemetry_figure([(g.title, g.names) for g in shown], buckets, colors=colors,
                                                          labels=labels, bucket_seconds=width, mark=mark)
    if "serving" in parts:
        out["serving"] = device_charts.serving_figure(
            devices.serving_breakdown(project=project, filters=filters, servers=servers), colors=colors, labels=labels)
    if "ttft" in parts or "tpot" in parts:
        step_filters = devices.page_filters(filters)
        summaries = aggregates.device_summaries(project=project, filters=step_filters, devices=servers)
        out.update({k: v for k, v in _ecdfs(project, step_filters, servers, colors, labels, summaries).items()
                    if k in parts})
    return out


def _ecdfs(project, filters, servers, colors, labels, summaries) -> dict:
    """The client TTFT and TPOT ECDFs of the servers, in the page's colours."""
    by_label = {labels.get(name, name): color for name, color in colors.items()}
    out = {}
    for metric, title in (("ttft", "Client TTFT by server"), ("tpot", "Client TPOT (ms per output token) by server")):
        series = aggregates.device_quantiles(project=project, filters=filters, metric=metric, devices=servers,
                                        summaries=summaries)
        out[metric] = ecdf_figure([(labels.get(n, n), fr, v) for n, fr, v in series], title=title, colors=by_label)
    return out
