"""Figures of the release comparison as Plotly figure dicts (pure functions: arrays in, dicts out)
and the releases list's sparkline as SVG points. The page embeds the dicts; static/js/releases.js
draws them with the vendored Plotly.

Sizes are bounded whatever the data: an ECDF is drawn through at most `ECDF_POINTS` quantiles
per release and a histogram has `HISTOGRAM_BINS` shared log-spaced bins, so a release of a
million tasks costs the browser the same as one of a thousand."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analysis.measures import percentiles
from analysis.units import fmt_ms, fmt_signed_ms, log_ticks

ECDF_POINTS = 400
HISTOGRAM_BINS = 40
COLOURS = {"a": "#667085", "b": "#3556d8"}


def _layout(title: str, x_title: str, y_title: str, **extra) -> dict:
    return {
        "title": {"text": title, "font": {"size": 14}},
        "xaxis": {"title": {"text": x_title}, "type": "log"},
        "yaxis": {"title": {"text": y_title}},
        "margin": {"l": 55, "r": 15, "t": 35, "b": 45},
        "legend": {"orientation": "h", "y": -0.2},
        "height": 320,
        **extra,
    }


def _duration_axis(title: str, values: Sequence[float]) -> dict:
    positive = [v for v in values if v > 0]
    axis = {"title": {"text": title}, "type": "log"}
    if positive:
        axis.update(log_ticks(min(positive), max(positive)))
    return axis


def ecdf_points(durations: np.ndarray, points: int = ECDF_POINTS) -> tuple[list[float], list[float]]:
    """(x, y) of the empirical CDF through at most `points` evenly spaced quantiles."""
    data = np.sort(np.asarray(durations, dtype=float))
    if data.size == 0:
        return [], []
    if data.size <= points:
        return data.tolist(), (np.arange(1, data.size + 1) / data.size).tolist()
    probs = np.linspace(0, 1, points)
    return percentiles(data, probs).tolist(), probs.tolist()


def ecdf_figure(series: Sequence[tuple[str, str, np.ndarray]]) -> dict:
    """Overlaid ECDFs; `series` is (side 'a'|'b', release name, durations in ms)."""
    data = []
    for side, name, durations in series:
        x, y = ecdf_points(durations)
        data.append({"type": "scatter", "mode": "lines", "name": name, "x": x, "y": y,
                     "line": {"shape": "hv", "color": COLOURS.get(side), "width": 2},
                     "text": [fmt_ms(v) for v in x],
                     "hovertemplate": "%{text}: %{y:.1%} of tasks<extra>" + side.upper() + "</extra>"})
    xs = [v for d in data for v in d["x"]]
    return {"data": data, "layout": _layout("Task duration, cumulative", "duration (log scale)",
                                            "share of tasks", xaxis=_duration_axis("duration (log scale)", xs),
                                            yaxis={"title": {"text": "share of tasks"},
                                                                     "tickformat": ".0%", "range": [0, 1]})}


def histogram_bins(series: Sequence[np.ndarray], bins: int = HISTOGRAM_BINS) -> np.ndarray:
    """Shared log-spaced bin edges covering every positive duration of every series."""
    positive = [np.asarray(s, dtype=float) for s in series]
    positive = [s[s > 0] for s in positive if s.size]
    positive = [s for s in positive if s.size]
    if not positive:
        return np.array([])
    lo = min(float(s.min()) for s in positive)
    hi = max(float(s.max()) for s in positive)
    if hi <= lo:
        hi = lo * 1.01 + 1e-9
    return np.geomspace(lo, hi, bins + 1)


def histogram_figure(series: Sequence[tuple[str, str, np.ndarray]]) -> dict:
    """Overlaid histograms (share of each release's tasks per bin) on shared log bins."""
    edges = histogram_bins([s[2] for s in series])
    data = []
    if edges.size:
        centres = np.sqrt(edges[:-1] * edges[1:])
        widths = edges[1:] - edges[:-1]
        for side, name, durations in series:
            values = np.asarray(durations, dtype=float)
            counts, _ = np.histogram(values[values > 0], bins=edges)
            share = counts / max(values.size, 1)
            data.append({"type": "bar", "name": name, "x": centres.tolist(), "y": share.tolist(),
                         "width": widths.tolist(), "opacity": 0.55,
                         "marker": {"color": COLOURS.get(side)},
                         "text": [f"{fmt_ms(lo)} – {fmt_ms(hi)}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)],
                         "hovertemplate": "%{text}: %{y:.1%}<extra>" + side.upper() + "</extra>"})
    return {"data": data, "layout": _layout("Task duration, distribution", "duration (log scale)",
                                            "share of tasks", barmode="overlay",
                                            xaxis=_duration_axis("duration (log scale)", edges.tolist()),
                                            yaxis={"title": {"text": "share of tasks"}, "tickformat": ".0%"})}


def contribution_figure(rows: Sequence[dict], *, limit: int = 10) -> dict:
    """Horizontal bars: each group's contribution to the change in mean task duration."""
    top = list(rows[:limit])[::-1]
    return {
        "data": [{"type": "bar", "orientation": "h", "x": [r["contribution_ms"] for r in top],
                  "y": [r["key"] for r in top],
                  "marker": {"color": ["#c4320a" if r["contribution_ms"] > 0 else "#2e7d32" for r in top]},
                  "text": [fmt_signed_ms(r["contribution_ms"]) for r in top],
                  "hovertemplate": "%{y}: %{text} per task<extra></extra>"}],
        "layout": {"title": {"text": "Change in mean time per task, by step", "font": {"size": 14}},
                   "xaxis": {"title": {"text": "time per task (B − A)"}, "zeroline": True},
                   "yaxis": {"automargin": True}, "height": 60 + 28 * max(len(top), 1),
                   "margin": {"l": 10, "r": 15, "t": 35, "b": 45}},
    }


def sparkline_points(values: Sequence[float | None], *, width: int = 120, height: int = 24) -> str:
    """SVG polyline `points` for a series (None = empty bucket, skipped); "" when nothing to draw."""
    known = [(i, float(v)) for i, v in enumerate(values) if v is not None]
    if not known:
        return ""
    lo = min(v for _, v in known)
    hi = max(v for _, v in known)
    span = hi - lo or 1.0
    step = width / max(len(values) - 1, 1)
    return " ".join(f"{i * step:.1f},{height - 2 - (v - lo) / span * (height - 4):.1f}" for i, v in known)
