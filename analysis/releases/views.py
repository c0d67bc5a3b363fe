"""The Releases pages: the list (volume, p95, sparkline per release) and the comparison of two
releases. Short functions: parse the URL, call one selector, render.

The comparison page embeds its figure dicts with `json_script` instead of serving them from a
second JSON endpoint: building the comparison is the expensive part, and doing it twice per
page view would double it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render

from analysis import costs
from analysis.access import project_for_user
from analysis.filters import FilterError
from analysis.releases import charts, stats
from analysis.releases.compare import (
    UnknownRelease,
    parse_threshold,
    release_compare,
    release_list,
    release_names,
)
from analysis.releases.scope import CompareFilters, compared_tasks, parse_compare_filters
from analysis.releases.stats import DEFAULT_ALPHA, DEFAULT_THRESHOLD_PCT
from ingest.models import Device

ATTRIBUTION_ROWS = 15
# Filters kept when the release picker is submitted.
CARRIED = ("environment", "range", "since", "until", "device")


def _project(request):
    name = request.GET.get("project")
    project = project_for_user(request.user, name)
    if project is None and name:
        raise Http404("no such project")
    return project


def _filters(request) -> tuple[CompareFilters, str]:
    try:
        return parse_compare_filters(request.GET), ""
    except FilterError as exc:
        return CompareFilters(), str(exc)


def _carry(request) -> list[tuple[str, str]]:
    return [(key, request.GET[key]) for key in CARRIED if request.GET.get(key)]


def _sparkline(points: list[dict]) -> str:
    values: list[float | None] = [None] * 20
    for point in points:
        index = min(max(point["bucket"], 1), 20) - 1
        values[index] = point["p95_ms"]
    return charts.sparkline_points(values)


@login_required
def releases(request):
    project = _project(request)
    filters, error = _filters(request)
    rows = release_list(project=project, filters=filters) if project and not error else []
    for row in rows:
        row["spark"] = _sparkline(row["sparkline"])
    for newer, older in zip(rows, rows[1:], strict=False):
        newer["previous"] = older["name"]
    return render(request, "releases/list.html", {
        "project": project, "releases": rows, "error": error, "carry": _carry(request),
        "default_a": rows[1]["name"] if len(rows) > 1 else "",
        "default_b": rows[0]["name"] if rows else "",
    }, status=400 if error else 200)


def _percent(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def _signed_percent(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}%"


def _p_value(value: float | None) -> str:
    if value is None:
        return "–"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _present(report: dict) -> None:
    """Adds display strings the template cannot compute (percentages, p-values)."""
    for row in [report["overall"], *report["tasks"]]:
        row["p_text"] = _p_value(row["p_value"])
        for p in row["percentiles"]:
            p["delta_pct_text"] = _signed_percent(p["delta_pct"])
    for rows in (report["attribution"][d] for d in ("steps", "kinds", "tools", "models")):
        for row in rows:
            row["share_a_text"] = _percent(row["share_a"], 1)
            row["share_b_text"] = _percent(row["share_b"], 1)
            row["error_a_text"] = _percent(row["error_rate_a"], 1)
            row["error_b_text"] = _percent(row["error_rate_b"], 1)
            row["p_text"] = _p_value(row["per_call_p_value"])
    for row in report["findings"]:
        row["rate_a_text"] = _percent(row["rate_a"], 1)
        row["rate_b_text"] = _percent(row["rate_b"], 1)
    for row in report["budget"]:
        row["share_a_text"] = _percent(row["share_a"], 1)
        row["share_b_text"] = _percent(row["share_b"], 1)
    for row in report["summary"]:
        rate = row["metric"].endswith("rate")
        fmt = (lambda v: _percent(v, 1)) if rate else (lambda v: "–" if v is None else f"{v:,.1f}")
        row["a_text"], row["b_text"] = fmt(row["a"]), fmt(row["b"])
        row["delta_text"] = _signed_percent(row["delta_pct"])


@login_required
def release_compare_page(request):
    project = _project(request)
    params = request.GET
    filters, error = _filters(request)
    threshold_pct, alpha = DEFAULT_THRESHOLD_PCT, DEFAULT_ALPHA
    if not error:
        try:
            threshold_pct, alpha = parse_threshold(params)
        except FilterError as exc:
            error = str(exc)
    names = release_names(project=project) if project else []
    a = params.get("a", "").strip() or (names[1] if len(names) > 1 else "")
    b = params.get("b", "").strip() or (names[0] if names else "")
    report, figures, cost = None, None, None
    if project and not error and a and b:
        try:
            comparison = release_compare(project=project, a=a, b=b, filters=filters,
                                         threshold_pct=threshold_pct, alpha=alpha)
        except UnknownRelease as exc:
            error = str(exc)
        else:
            report = comparison.report
            _present(report)
            cost = costs.release_costs_cached(
                project=project, tasks=compared_tasks(project=project, releases=[a, b], filters=filters),
                a=a, b=b, key=filters)
            latency = {r["key"]: r["contribution_ms"] for r in report["attribution"]["steps"]}
            for row in cost["steps"]:
                row["latency_delta_ms"] = latency.get(row["key"])
            series = [("a", a, comparison.durations[a]), ("b", b, comparison.durations[b])]
            figures = {
                "ecdf": charts.ecdf_figure(series),
                "histogram": charts.histogram_figure(series),
                "contribution": charts.contribution_figure(report["attribution"]["steps"]),
            }
    context = {
        "project": project, "error": error, "report": report, "figures": figures, "cost": cost,
        "a": a, "b": b, "release_names": names, "filters": filters,
        "threshold_pct": threshold_pct, "alpha": alpha,
        "level_text": f"{100 * stats.interval_level(alpha):g}%",
        "attribution_rows": ATTRIBUTION_ROWS, "carry": _carry(request),
        "vendors": sorted(set(Device.objects.filter(project=project).exclude(vendor="")
                              .values_list("vendor", flat=True))) if project else [],
        "task_names": sorted({t["name"] for t in report["tasks"]} | ({filters.name} - {""}))
        if report else [],
    }
    return render(request, "releases/compare.html", context, status=400 if error else 200)
