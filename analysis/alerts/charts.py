"""Figures of alert pages as data: a Plotly figure dict for a rule's metric against its
threshold, and the points of the inline SVG sparkline of the rules list. Pure functions."""

from __future__ import annotations

from datetime import datetime

from analysis.units import fmt_value, linear_ticks

COLORS = {"value": "#2563eb", "evaluated": "#64748b", "threshold": "#dc2626"}


def metric_figure(*, times: list[datetime], values: list[float | None], threshold: float | None,
                  title: str, unit: str, evaluated: list[tuple[str, float | None]] = ()) -> dict:
    """The metric per window (and the values the rule actually saw at each evaluation) with the
    threshold as a dashed line."""
    x = [t.isoformat() for t in times]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "metric per window", "x": x,
             "y": values, "line": {"color": COLORS["value"]}, "connectgaps": False,
             "hovertext": [fmt_value(v, unit) for v in values], "hoverinfo": "text+x"}]
    if evaluated:
        data.append({"type": "scatter", "mode": "lines", "name": "at each evaluation",
                     "x": [t for t, _ in evaluated], "y": [v for _, v in evaluated],
                     "line": {"color": COLORS["evaluated"], "width": 1}})
    if threshold is not None:
        data.append({"type": "scatter", "mode": "lines", "name": f"threshold {fmt_value(threshold, unit)}",
                     "x": [x[0], x[-1]] if x else [], "y": [threshold, threshold] if x else [],
                     "line": {"color": COLORS["threshold"], "dash": "dash", "width": 2}, "hoverinfo": "skip"})
    yaxis = {"title": {"text": unit}, "rangemode": "tozero"}
    if unit == "ms":  # durations tick like every other duration: "0 ms 5 s 10 s"
        yaxis.update(linear_ticks(max([v for v in values if v is not None] + [v for _, v in evaluated if v is not None]
                                     + [threshold or 0])))
        yaxis["title"] = {"text": "duration"}
    return {"data": data, "layout": {
        "title": {"text": title, "font": {"size": 14}}, "height": 320,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 40}, "yaxis": yaxis,
        "xaxis": {"type": "date"}, "legend": {"orientation": "h", "y": -0.2}}}


def sparkline_points(values: list[float | None], *, width: int = 120, height: int = 24,
                     threshold: float | None = None) -> dict:
    """SVG polyline points (and the threshold's y) for the last values; gaps are skipped."""
    known = [v for v in values if v is not None]
    if not known:
        return {"points": "", "last": None, "threshold_y": None, "width": width, "height": height}
    top = max(known + ([threshold] if threshold is not None else []))
    bottom = min(known + ([threshold] if threshold is not None else []))
    span = (top - bottom) or 1.0
    n = max(len(values) - 1, 1)

    def y(v: float) -> float:
        return round(height - 2 - (v - bottom) / span * (height - 4), 1)

    coords = [(round(i * width / n, 1), y(v)) for i, v in enumerate(values) if v is not None]
    return {"points": " ".join(f"{x},{yy}" for x, yy in coords), "last": coords[-1],
            "threshold_y": None if threshold is None else y(threshold), "width": width, "height": height}
