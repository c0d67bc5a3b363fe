"""Chart builders: pure functions from plain rows to Plotly figure dicts ({"data", "layout"}).

The views serve these as JSON and one small JS file per page draws them with the vendored
plotly.min.js. Nothing here touches Django or the database, so every chart is tested on its
dict.

Escaping: Plotly renders a pseudo-HTML subset (<b>, <br>, <a href>, <span style>) in trace
names, hover text, tick labels and annotations, and decodes entities. Trace content (task and
step names, tool arguments, releases, device names) is hostile, so every user-supplied string
that ends up in a rendered field goes through `esc` first. `customdata` carries raw values for
click handlers only; no hovertemplate here ever references it.

Thresholds: the waterfall draws one SVG bar per step up to BAR_LIMIT visible rows (SVG stays
responsive up to a couple of thousand shapes); beyond that it switches to WebGL (`scattergl`,
one marker per step with a horizontal error bar spanning the step), which draws 50,000 steps
in about a second. Tasks above BIG_TASK_STEPS steps open with only the first level expanded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from analysis.rollups.histograms import APPROXIMATE_BOUND
from analysis.units import fmt_ms, linear_ticks, log_ticks

BAR_LIMIT = 1500
BIG_TASK_STEPS = 2000
LABEL_LIMIT = 250  # rows above which the waterfall drops its per-row tick labels

KIND_COLORS = {
    "llm": "#3556d8", "tool": "#e07b00", "retrieval": "#0f9d76", "agent": "#7a4cc2",
    "framework": "#8a94a6", "queue": "#c4320a", "other": "#b0b7c3",
}
BUDGET_CATEGORIES = ["prefill", "decode", "tool", "retrieval", "framework", "queue"]
BUDGET_COLORS = {"prefill": "#3556d8", "decode": "#7d9bff", "tool": "#e07b00",
                 "retrieval": "#0f9d76", "framework": "#8a94a6", "queue": "#c4320a"}
PALETTE = ["#3556d8", "#e07b00", "#0f9d76", "#c4320a", "#7a4cc2", "#8a6d00", "#d6457a",
           "#2a9fd6", "#5b6b00", "#6b4f3a"]
PERCENTILE_DASH = {"p50": "dot", "p95": "dash", "p99": "solid"}
# The device lane under the waterfall: the first MAX_LANE_BANDS of these that the task's devices
# report, in this order (a server's queue, running requests and KV cache; its GPUs' SM clock,
# utilisation, temperature and power; `throttled` only from the native device event).
LANE_METRICS = [("queue_depth", "queue"), ("kv_cache_usage", "KV cache"), ("sm_clock_mhz", "SM MHz"),
                ("utilization", "util"), ("temperature_c", "temp °C"), ("batch_size", "running"),
                ("power_w", "power W"), ("throttled", "throttled")]
MAX_LANE_BANDS = 5
TIME_SINCE_START = "time since task start"
LANE_BAND_PX = 60


def esc(value: object) -> str:
    """Text safe for any Plotly text field: the three characters Plotly's pseudo-HTML parses."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _layout(**extra) -> dict:
    layout = {
        "margin": {"l": 60, "r": 20, "t": 36, "b": 40},
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "hovermode": "closest",
        "paper_bgcolor": "#fff",
        "plot_bgcolor": "#fff",
        "legend": {"orientation": "h", "y": -0.18},
    }
    layout.update(extra)
    return layout


def _title(text: str) -> dict:
    return {"text": esc(text), "x": 0, "xanchor": "left", "font": {"size": 14}}


def empty_figure(message: str) -> dict:
    return {"data": [], "layout": _layout(
        xaxis={"visible": False}, yaxis={"visible": False}, height=220,
        annotations=[{"text": esc(message), "showarrow": False, "xref": "paper", "yref": "paper",
                      "x": 0.5, "y": 0.5, "font": {"size": 14, "color": "#667085"}}])}


def duration_axis(values: Iterable[float | None], *, log: bool = True, **extra) -> dict:
    """An axis of durations in ms whose ticks read like every other duration (units.fmt_ms):
    1-2-5 steps on a log axis, a 1-2-5 step from 0 on a linear one."""
    known = [v for v in values if v is not None and v > 0]
    axis = {"type": "log" if log else "linear", "automargin": True, **extra}  # "500 ms" is wider than "500"
    if known:
        axis.update(log_ticks(min(known), max(known)) if log else linear_ticks(max(known)))
    return axis


def lower_bound_ms(ms: float | None) -> int | None:
    """A percentile as the `min_duration_ms` of a link to the tasks at or above it: whole ms,
    rounded down, so the filter box reads 25904 (not 25904.29315487388) and still lists the
    task at exactly that percentile."""
    return None if ms is None else math.floor(ms)


def _colors(labels: Iterable[str]) -> dict[str, str]:
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}


# --- overview --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesPoint:
    """One time bucket of one release: task volume, errors and duration percentiles."""
    bucket: str          # ISO start of the bucket
    bucket_end: str      # ISO end of the bucket
    release: str
    count: int
    errors: int
    p50: float | None
    p95: float | None
    p99: float | None


def _by_release(points: Sequence[SeriesPoint]) -> dict[str, list[SeriesPoint]]:
    out: dict[str, list[SeriesPoint]] = {}
    for p in points:
        out.setdefault(p.release, []).append(p)
    return out


def _release_label(release: str) -> str:
    return esc(release) if release else "(no release)"


def volume_figure(points: Sequence[SeriesPoint]) -> dict:
    if not points:
        return empty_figure("No tasks in this range")
    groups = _by_release(points)
    colors = _colors(groups)
    data = [{
        "type": "bar", "name": _release_label(release), "marker": {"color": colors[release]},
        "x": [p.bucket for p in rows], "y": [p.count for p in rows],
        "hovertext": [f"{_release_label(release)}<br>{p.count} tasks" for p in rows],
        "hoverinfo": "text+x",
    } for release, rows in groups.items()]
    return {"data": data, "layout": _layout(title=_title("Tasks"), barmode="stack", height=260,
                                            yaxis={"title": {"text": "tasks"}})}


def error_rate_figure(points: Sequence[SeriesPoint]) -> dict:
    if not points:
        return empty_figure("No tasks in this range")
    groups = _by_release(points)
    colors = _colors(groups)
    data = []
    for release, rows in groups.items():
        rates = [round(100 * p.errors / p.count, 2) if p.count else None for p in rows]
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": _release_label(release),
            "line": {"color": colors[release]}, "x": [p.bucket for p in rows], "y": rates,
            "hovertext": [f"{_release_label(release)}<br>{p.errors} of {p.count} failed"
                          for p in rows],
            "hoverinfo": "text+x+y",
        })
    return {"data": data, "layout": _layout(title=_title("Error rate"), height=260,
                                            yaxis={"title": {"text": "% errors"},
                                                   "rangemode": "tozero"})}


def percentile_figure(points: Sequence[SeriesPoint]) -> dict:
    """p50/p95/p99 task duration over time, one colour per release, one dash per percentile.
    customdata = [release, bucket start, bucket end, value]: a click lists the tasks of that
    bucket and release at or above the value (the tail behind the point)."""
    if not points:
        return empty_figure("No tasks in this range")
    groups = _by_release(points)
    colors = _colors(groups)
    data = []
    for release, rows in groups.items():
        for pct in ("p99", "p95", "p50"):
            values = [getattr(p, pct) for p in rows]
            if all(v is None for v in values):  # e.g. "(other)": volume only
                continue
            data.append({
                "type": "scatter", "mode": "lines+markers",
                "name": f"{_release_label(release)} {pct}", "legendgroup": release,
                "line": {"color": colors[release], "dash": PERCENTILE_DASH[pct]},
                "x": [p.bucket for p in rows], "y": values,
                "customdata": [[release, p.bucket, p.bucket_end, lower_bound_ms(v)]
                               for p, v in zip(rows, values, strict=True)],
                "hovertext": [f"{_release_label(release)} {pct} ≈{fmt_ms(v)} ({APPROXIMATE_BOUND})<br>{p.count} tasks"
                              "<br>click: list the tasks at or above" for p, v in zip(rows, values, strict=True)],
                "hoverinfo": "text+x",
            })
    return {"data": data, "layout": _layout(
        title=_title(f"Task duration p50 / p95 / p99 (≈, {APPROXIMATE_BOUND})"), height=320,
        yaxis=duration_axis((v for d in data for v in d["y"]), title={"text": "duration (log scale)"}))}


@dataclass(frozen=True)
class FindingTotal:
    kind: str
    findings: int
    tasks: int
    wasted_ms: float


def top_findings_figure(rows: Sequence[FindingTotal]) -> dict:
    """Finding kinds by total wasted time; customdata = kind (a click lists those tasks)."""
    if not rows:
        return empty_figure("No findings in this range")
    ordered = sorted(rows, key=lambda r: r.wasted_ms)
    return {"data": [{
        "type": "bar", "orientation": "h", "marker": {"color": "#c4320a"},
        "y": [esc(r.kind) for r in ordered], "x": [round(r.wasted_ms, 1) for r in ordered],
        "customdata": [r.kind for r in ordered],
        "hovertext": [f"{esc(r.kind)}: {fmt_ms(r.wasted_ms)} wasted<br>{r.findings} findings in "
                      f"{r.tasks} tasks<br>click: list those tasks" for r in ordered],
        "hoverinfo": "text",
    }], "layout": _layout(title=_title("Top findings by wasted time"), height=80 + 28 * len(rows),
                          xaxis=duration_axis((r.wasted_ms for r in rows), log=False, title={"text": "time wasted"}),
                          yaxis={"automargin": True},  # the longest kind name whole, not cut at the edge
                          margin={"l": 20, "r": 20, "t": 36, "b": 40})}


def budget_figure(rows: Sequence[tuple[str, Mapping[str, float]]], *, title: str,
                  axis_title: str = "mean time per task") -> dict:
    """Latency budget as a horizontal stacked bar per row (release, or one task)."""
    rows = [(label, budget) for label, budget in rows if budget]
    if not rows:
        return empty_figure("No analysed tasks yet")
    categories = list(BUDGET_CATEGORIES)
    for _, budget in rows:
        categories += [c for c in budget if c not in categories]
    labels = [esc(label) if label else "(no release)" for label, _ in rows]
    data = []
    for i, cat in enumerate(categories):
        values = [float(budget.get(cat) or 0) for _, budget in rows]
        if not any(values):
            continue
        data.append({
            "type": "bar", "orientation": "h", "name": esc(cat), "y": labels, "x": values,
            "marker": {"color": BUDGET_COLORS.get(cat, PALETTE[i % len(PALETTE)])},
            "hovertext": [f"{lab}<br>{esc(cat)}: {fmt_ms(v)}" for lab, v in zip(labels, values, strict=True)],
            "hoverinfo": "text",
        })
    return {"data": data, "layout": _layout(title=_title(title), barmode="stack",
                                            height=130 + 34 * len(rows),
                                            legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"},
                                            xaxis=duration_axis((sum(float(v or 0) for v in b.values()) for _, b in rows),
                                                                log=False, title={"text": axis_title}),
                                            margin={"l": 110, "r": 20, "t": 36, "b": 40})}


# --- latency ---------------------------------------------------------------------------------


def log_edges(*, per_decade: int = 10, low_exp: int = -1, high_exp: int = 7) -> list[float]:
    """Histogram edges evenly spaced on a log axis, rounded so the same numbers go into SQL
    and into the drill-down URL (a task exactly on an edge lands in one bucket on both)."""
    return [float(f"{10 ** (k / per_decade):.4g}")
            for k in range(low_exp * per_decade, high_exp * per_decade + 1)]


def histogram_figure(buckets: Sequence[tuple[float, float, int]], *, title: str,
                     clickable: bool = True) -> dict:
    """Bars on a log10(ms) axis labelled in ms; customdata = [low, high] of each bucket."""
    if not buckets:
        return empty_figure("No durations in this range")
    lows = [math.log10(max(lo, 1e-3)) for lo, _, _ in buckets]
    highs = [math.log10(max(hi, 1e-3)) for _, hi, _ in buckets]
    ticks = log_ticks(min(lo for lo, _, _ in buckets), max(hi for _, hi, _ in buckets))
    hint = "<br>click: list these tasks" if clickable else ""
    return {"data": [{
        "type": "bar", "marker": {"color": "#3556d8"},
        "x": [(a + b) / 2 for a, b in zip(lows, highs, strict=True)], "width": [b - a for a, b in zip(lows, highs, strict=True)],
        "y": [n for _, _, n in buckets],
        "customdata": [[lo, hi] for lo, hi, _ in buckets],
        "hovertext": [f"{fmt_ms(lo)} – {fmt_ms(hi)}: {n}{hint}" for lo, hi, n in buckets],
        "hoverinfo": "text",
    }], "layout": _layout(
        title=_title(title), height=300, bargap=0.05,
        xaxis={"title": {"text": "duration (log scale)"}, "tickmode": "array",
               "tickvals": [math.log10(v) for v in ticks["tickvals"]], "ticktext": ticks["ticktext"]},
        yaxis={"title": {"text": "count"}})}


def ecdf_figure(series: Sequence[tuple[str, Sequence[float], Sequence[float | None]]], *,
                title: str, colors: Mapping[str, str] | None = None) -> dict:
    """ECDF per series from quantiles: (label, fractions, values at those fractions). `colors`:
    a colour per label kept across a page's charts (the Devices page's one per device)."""
    series = [(label, fr, vals) for label, fr, vals in series if any(v is not None for v in vals)]
    if not series:
        return empty_figure("No durations in this range")
    colors = {**_colors(label for label, _, _ in series), **(colors or {})}
    data = [{
        "type": "scatter", "mode": "lines", "name": esc(label) or "(none)",
        "line": {"color": colors[label], "shape": "hv"},
        "x": [max(v, 1e-3) for v in values if v is not None],
        "y": [f for f, v in zip(fractions, values, strict=True) if v is not None],
        "hovertext": [f"{esc(label)}<br>p{100 * f:g}: ≈{fmt_ms(v)} ({APPROXIMATE_BOUND})"
                      for f, v in zip(fractions, values, strict=True) if v is not None],
        "hoverinfo": "text",
    } for label, fractions, values in series]
    return {"data": data, "layout": _layout(
        title=_title(title), height=330,
        xaxis=duration_axis((x for d in data for x in d["x"]), title={"text": "duration (log scale)"}),
        legend={"orientation": "h", "y": -0.28, "yanchor": "top"}, margin={"l": 60, "r": 20, "t": 36, "b": 60},
        yaxis={"title": {"text": "fraction ≤ x"}, "range": [0, 1.02]})}


# --- devices ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplePoint:
    device: str
    x: object           # a bucket timestamp (devices page) or ms since task start (lane)
    values: Mapping[str, float | None]


def lane_axis(samples: Sequence[SamplePoint], metric: str, x_range: Sequence[float]) -> dict:
    """A lane's y axis scaled to its own data: from 0 (or its lowest value, when negative) to its
    highest value plus headroom, both ends labelled, so a 90 °C reading sits under a "90" tick
    instead of at the edge of a band labelled 0 and 50 (the readings the waterfall shows, those
    within the task's span; all of them when none is)."""
    values = [p.values.get(metric) for p in samples if x_range[0] <= p.x <= x_range[1]]
    values = [v for v in values if v is not None] or [p.values[metric] for p in samples
                                                      if p.values.get(metric) is not None]
    if not values:
        return {"rangemode": "tozero", "nticks": 3}
    low, high = min(0.0, min(values)), max(values)
    if high <= low:
        high = low + 1.0
    span = high - low
    ticks = [low, high] if low == 0 else [low, 0.0, high]
    return {"range": [low - (0.08 * span if low < 0 else 0.0), high + 0.15 * span], "autorange": False,
            "tickmode": "array", "tickvals": ticks, "ticktext": [_lane_tick(v) for v in ticks]}


def _lane_tick(value: float) -> str:
    """1,410 (an SM clock in MHz), 0.539, 90: never 1.94e+03."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _axis_key(i: int) -> str:
    return "yaxis" if i == 1 else f"yaxis{i}"


def _axis_ref(i: int) -> str:
    return "y" if i == 1 else f"y{i}"


def _lane_traces(points, devices, colors, metrics, *, first_axis: int):
    data, named = [], set()  # a device in the legend once, from the first band it is drawn in
    for i, (metric, label) in enumerate(metrics):
        for device in devices:
            rows = [p for p in points if p.device == device and p.values.get(metric) is not None]
            if not rows:
                continue
            data.append({
                "type": "scatter", "mode": "lines", "name": esc(device), "legendgroup": device,
                "showlegend": device not in named, "line": {"color": colors[device], "shape": "hv", "width": 1.5},
                "x": [p.x for p in rows], "y": [p.values[metric] for p in rows],
                "yaxis": _axis_ref(first_axis + i),
                "hovertext": [f"{esc(device)} {label}: {p.values[metric]:g}" for p in rows],
                "hoverinfo": "text+x",
            })
            named.add(device)
    return data, {}


# --- the task waterfall ----------------------------------------------------------------------


class StepRow(NamedTuple):
    """A step as the waterfall needs it, in tree order; times are ms since the task started.
    A NamedTuple: building 50,000 of them must cost milliseconds."""
    step_id: str
    parent_step_id: str
    depth: int
    kind: str
    name: str
    start_ms: float
    duration_ms: float
    status: str = "ok"
    model: str = ""
    device: str = ""
    ttft_ms: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tool_name: str = ""
    tool_args: str = ""
    error: str = ""

    # What `selectors.tree_order` sorts siblings by.
    @property
    def started_at(self) -> float:
        return self.start_ms

    @property
    def ended_at(self) -> float:
        return self.start_ms + self.duration_ms


class VisibleRow(NamedTuple):
    row: StepRow
    descendants: int          # steps below it in the tree
    collapsed: bool           # its subtree is hidden
    finding_summaries: tuple[str, ...] = ()  # on it or on hidden descendants
    possible_summaries: tuple[str, ...] = ()  # the same, of low-confidence findings


def default_mode(step_count: int) -> str:
    return "all" if step_count <= BIG_TASK_STEPS else "top"


def subtree_sizes(rows: Sequence[StepRow]) -> list[int]:
    """Descendant count of each row; rows are in tree order, so a subtree is the run of rows
    after it that are deeper. Linear, whatever the depth."""
    sizes = [0] * len(rows)
    stack: list[int] = []
    for i, row in enumerate(rows):
        while stack and rows[stack[-1]].depth >= row.depth:
            j = stack.pop()
            sizes[j] = i - j - 1
        stack.append(i)
    for j in stack:
        sizes[j] = len(rows) - j - 1
    return sizes


def visible_rows(rows: Sequence[StepRow], *, mode: str, toggled: Iterable[str] = (),
                 findings: Mapping[str, Sequence[str]] | None = None,
                 possible: Mapping[str, Sequence[str]] | None = None) -> list[VisibleRow]:
    """The rows to draw. `mode` "all" expands everything, "top" collapses every step below the
    first level that has children; `toggled` step ids flip that default. Findings (and possible,
    i.e. low-confidence, findings) on hidden steps move to the nearest visible ancestor, so a
    collapsed subtree still shows its problem."""
    findings = findings or {}
    possible = possible or {}
    flipped = set(toggled)
    sizes = subtree_sizes(rows)
    out: list[VisibleRow] = []
    i = 0
    while i < len(rows):
        row = rows[i]
        has_children = sizes[i] > 0
        collapsed = has_children and ((mode == "top" and row.depth >= 1) != (row.step_id in flipped))
        summaries = list(findings.get(row.step_id, ()))
        guesses = list(possible.get(row.step_id, ()))
        if collapsed:
            for hidden in rows[i + 1: i + 1 + sizes[i]]:
                summaries += findings.get(hidden.step_id, ())
                guesses += possible.get(hidden.step_id, ())
        out.append(VisibleRow(row, sizes[i], collapsed, tuple(summaries), tuple(guesses)))
        i += 1 + (sizes[i] if collapsed else 0)
    return out


def reveal(rows: Sequence[StepRow], *, mode: str, toggled: Iterable[str], step_id: str) -> list[str]:
    """`toggled` plus whatever flips open every collapsed ancestor of `step_id`, so a step named
    in a link (a finding, the URL) is drawn even when its subtree starts collapsed."""
    flipped = set(toggled)
    index = next((i for i, r in enumerate(rows) if r.step_id == step_id), None)
    if index is None:
        return sorted(flipped)
    depth = rows[index].depth
    for row in reversed(rows[:index]):
        if row.depth < depth:
            depth = row.depth
            collapsed = (mode == "top" and row.depth >= 1) != (row.step_id in flipped)
            if collapsed:
                flipped ^= {row.step_id}
        if depth == 0:
            break
    return sorted(flipped)


def step_hover(row: StepRow, *, critical: bool, hidden: int = 0) -> str:
    parts = [f"<b>{esc(truncate(row.name or row.kind, 80))}</b>",
             f"{esc(row.kind)} · {fmt_ms(row.duration_ms)} · {esc(row.status or 'ok')}"
             f" · starts +{fmt_ms(row.start_ms)}"]
    if row.model or row.device:
        parts.append(" · ".join(esc(truncate(v, 60)) for v in (row.model, row.device) if v))
    if row.ttft_ms is not None or row.input_tokens is not None or row.output_tokens is not None:
        tokens = f"tokens {row.input_tokens or 0} in → {row.output_tokens or 0} out"
        ttft = f"TTFT {fmt_ms(row.ttft_ms)} · " if row.ttft_ms is not None else ""
        parts.append(ttft + tokens)
    if row.tool_name or row.tool_args:
        parts.append(f"tool {esc(truncate(row.tool_name, 60))}({esc(truncate(row.tool_args, 120))})")
    if row.error:
        parts.append(f"error: {esc(truncate(row.error, 120))}")
    if critical:
        parts.append("on the critical path")
    if hidden:
        parts.append(f"{hidden} steps hidden: click, then Expand")
    return "<br>".join(parts)


POSSIBLE_FINDINGS = "possible findings"


def _findings_hover(v: VisibleRow) -> str:
    lines = [esc(truncate(s, 160)) for s in v.finding_summaries[:5]]
    if v.possible_summaries:
        lines.append("<i>possible, not counted in wasted time:</i>")
        lines += [esc(truncate(s, 240)) for s in v.possible_summaries[:3]]
    return "<br>".join(lines)


def _row_label(v: VisibleRow) -> str:
    marker = "▸ " if v.collapsed else ""
    return "\u2003" * min(v.row.depth, 12) + marker + esc(truncate(v.row.name or v.row.kind, 40))


def waterfall_figure(rows: Sequence[StepRow], *, critical_path: Iterable[str] = (),
                     findings: Mapping[str, Sequence[str]] | None = None,
                     possible: Mapping[str, Sequence[str]] | None = None, mode: str | None = None,
                     toggled: Iterable[str] = (), samples: Sequence[SamplePoint] = ()) -> dict:
    """The task waterfall with its device lane below on the same x axis (ms since task start).

    One bar per visible step, coloured by kind (WebGL beyond BAR_LIMIT rows); the critical path
    is outlined and marked ▶; findings are red diamonds at the end of their step (or of the
    collapsed ancestor that hides it), `possible` (low-confidence) ones faint diamonds where no
    other finding is. customdata = step id for the click handler."""
    if not rows:
        return empty_figure("This task has no steps")
    mode = mode or default_mode(len(rows))
    critical = set(critical_path)
    visible = visible_rows(rows, mode=mode, toggled=toggled, findings=findings, possible=possible)
    use_gl = len(visible) > BAR_LIMIT
    data = _step_traces(visible, critical, use_gl=use_gl)
    data += _marker_traces(visible, critical, scatter="scattergl" if use_gl else "scatter")
    x_range = _task_span(visible)
    n = len(visible)
    plot_height = max(140, min(n * 22, 900))
    yaxis = _row_axis(visible)
    layout = _layout(barmode="overlay", bargap=0.25, dragmode="zoom", legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
                     margin={"l": 20, "r": 20, "t": 30, "b": 40})
    layout["meta"] = {"mode": mode, "visible": n, "steps": len(rows), "webgl": use_gl,
                      "toggled": sorted(set(toggled)),
                      "collapsed": [v.row.step_id for v in visible if v.collapsed]}
    metrics = lane_metrics(samples)
    if metrics:
        lane_data, axes = _device_lane_below(samples, metrics, yaxis, x_range, plot_height)
        data += lane_data
        layout.update(axes)
    else:
        layout["yaxis"] = yaxis
        layout["xaxis"] = {"title": {"text": TIME_SINCE_START}, "zeroline": False, "range": x_range}
        layout["height"] = plot_height + 70
    return {"data": data, "layout": layout}


def _step_traces(visible: Sequence[VisibleRow], critical: set[str], *, use_gl: bool) -> list[dict]:
    """One trace per step kind: a bar per step, critical-path steps outlined; beyond BAR_LIMIT
    rows a WebGL marker per step with a horizontal error bar spanning it."""
    by_kind: dict[str, list[int]] = {}
    for i, v in enumerate(visible):
        by_kind.setdefault(v.row.kind if v.row.kind in KIND_COLORS else "other", []).append(i)
    data = []
    for kind, idx in by_kind.items():
        rs = [visible[i] for i in idx]
        hover = [step_hover(v.row, critical=v.row.step_id in critical,
                            hidden=v.descendants if v.collapsed else 0) for v in rs]
        ids = [v.row.step_id for v in rs]
        if use_gl:
            data.append({
                "type": "scattergl", "mode": "markers", "name": esc(kind),
                "x": [round(v.row.start_ms + v.row.duration_ms / 2, 3) for v in rs], "y": idx,
                "error_x": {"type": "data", "symmetric": True, "width": 0, "thickness": 5,
                            "color": KIND_COLORS[kind],
                            "array": [round(v.row.duration_ms / 2, 3) for v in rs]},
                "marker": {"color": KIND_COLORS[kind], "size": 3},
                "customdata": ids, "hovertext": hover, "hoverinfo": "text",
            })
        else:
            data.append({
                "type": "bar", "orientation": "h", "name": esc(kind), "width": 0.7,
                "y": idx, "base": [round(v.row.start_ms, 3) for v in rs],
                "x": [max(round(v.row.duration_ms, 3), 0.001) for v in rs],
                "marker": {"color": KIND_COLORS[kind],
                           "line": {"color": "#111827",
                                    "width": [2 if v.row.step_id in critical else 0 for v in rs]}},
                "customdata": ids, "hovertext": hover, "hoverinfo": "text",
            })
    return data


def _marker_traces(visible: Sequence[VisibleRow], critical: set[str], *, scatter: str) -> list[dict]:
    """The ▶ at the start of each critical-path step, and the diamonds of findings and possible
    findings at the end of their step; each trace only when it has a marker."""
    data = []
    crit = [i for i, v in enumerate(visible) if v.row.step_id in critical]
    if crit:
        data.append({
            "type": scatter, "mode": "markers", "name": "critical path",
            "x": [visible[i].row.start_ms for i in crit], "y": crit,
            "marker": {"symbol": "triangle-right", "color": "#111827", "size": 8},
            "customdata": [visible[i].row.step_id for i in crit],
            "hovertext": [f"critical path: {esc(truncate(visible[i].row.name, 80))}" for i in crit],
            "hoverinfo": "text",
        })
    flagged = [i for i, v in enumerate(visible) if v.finding_summaries]
    if flagged:
        data.append({
            "type": scatter, "mode": "markers", "name": "findings",
            "x": [visible[i].row.start_ms + visible[i].row.duration_ms for i in flagged], "y": flagged,
            "marker": {"symbol": "diamond", "color": "#c4320a", "size": 11,
                       "line": {"color": "#fff", "width": 1}},
            "customdata": [visible[i].row.step_id for i in flagged],
            "hovertext": [_findings_hover(visible[i]) for i in flagged],
            "hoverinfo": "text",
        })
    # Findings that count in no total: dimmed, and only where no sure finding is drawn already.
    guessed = [i for i, v in enumerate(visible) if v.possible_summaries and not v.finding_summaries]
    if guessed:
        data.append({
            "type": scatter, "mode": "markers", "name": POSSIBLE_FINDINGS, "opacity": 0.4,
            "x": [visible[i].row.start_ms + visible[i].row.duration_ms for i in guessed], "y": guessed,
            "marker": {"symbol": "diamond-open", "color": "#c4320a", "size": 11},
            "customdata": [visible[i].row.step_id for i in guessed],
            "hovertext": [_findings_hover(visible[i]) for i in guessed],
            "hoverinfo": "text",
        })
    return data


def _task_span(visible: Sequence[VisibleRow]) -> list[float]:
    """The x range: the visible steps' span, padded 2 %. The task's own span, because device
    samples reach 30 s either side and must not squeeze the bars."""
    end = max(v.row.start_ms + v.row.duration_ms for v in visible)
    start = min(v.row.start_ms for v in visible)
    pad = max((end - start) * 0.02, 1.0)
    return [start - pad, end + pad]


def _row_axis(visible: Sequence[VisibleRow]) -> dict:
    """The y axis of the rows, first on top: a label per row up to LABEL_LIMIT rows, else a count."""
    n = len(visible)
    yaxis = {"autorange": "reversed", "zeroline": False, "showgrid": False, "fixedrange": False}
    if n <= LABEL_LIMIT:
        yaxis.update(tickmode="array", tickvals=list(range(n)),
                     ticktext=[_row_label(v) for v in visible], automargin=True)
    else:
        yaxis.update(showticklabels=False, title={"text": f"{n} steps"})
    return yaxis


def lane_metrics(samples: Sequence[SamplePoint]) -> list[tuple[str, str]]:
    """The lane's bands: the LANE_METRICS some sample reports, at most MAX_LANE_BANDS."""
    reported = {m for p in samples for m, v in p.values.items() if v is not None}
    return [(m, label) for m, label in LANE_METRICS if m in reported][:MAX_LANE_BANDS]


def _device_lane_below(samples: Sequence[SamplePoint], metrics: Sequence[tuple[str, str]], yaxis: dict,
                       x_range: list[float], plot_height: int) -> tuple[list[dict], dict]:
    """The device lane's traces, and the layout's axes and height with the lane under the
    steps: one band per `metrics` (lane_metrics: what the devices report), the steps' y axis above
    them, one shared x axis under the lowest band."""
    devices = list(dict.fromkeys(p.device for p in samples))
    lane_data, _ = _lane_traces(samples, devices, _colors(devices), metrics, first_axis=2)
    lane_h = LANE_BAND_PX * len(metrics)
    total = plot_height + lane_h + 70
    top_of_lane = lane_h / total
    axes = {"yaxis": {**yaxis, "domain": [top_of_lane + 0.03, 1]}}
    band = top_of_lane / len(metrics)
    for i, (metric, label) in enumerate(metrics):
        low = top_of_lane - (i + 1) * band
        axes[_axis_key(i + 2)] = {"domain": [low + band * 0.2, low + band],
                                  "title": {"text": label, "font": {"size": 10}},
                                  **lane_axis(samples, metric, x_range)}
    axes["xaxis"] = {"anchor": _axis_ref(len(metrics) + 1), "range": x_range,
                     "title": {"text": TIME_SINCE_START, "standoff": 6}, "zeroline": False}
    axes["height"] = total
    return lane_data, axes
