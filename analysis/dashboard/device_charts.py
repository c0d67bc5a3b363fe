"""Figures of the servers and devices page, as pure functions (Plotly figure dicts): the small
multiples of telemetry (a row per host, a column per metric, one colour per device) and the
server's account of its calls next to the client's. Escaping as in charts.py: every name that
reaches a rendered field goes through `esc`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from analysis.dashboard.charts import (
    BUDGET_COLORS,
    _layout,
    _title,
    duration_axis,
    empty_figure,
    esc,
)
from analysis.engine.verdicts import CLOCK_REASONS
from analysis.units import fmt_ms

# (metric, axis title, which reading a bucket shows, scale, unit, the dotted companion series).
# A bucket shows its highest reading (its lowest for the SM clock): a queue spike or a clock drop
# of a minute stays visible in an hour-wide bucket, where a mean would flatten it.
COLUMNS = [
    ("queue", "waiting requests", "high", 1.0, "", None),
    ("running", "running requests", "high", 1.0, "", None),
    ("kv", "KV cache %", "high", 100.0, " %", None),
    ("clock", "SM clock vs max, MHz", "low", 1.0, " MHz", "clock_max"),
    ("power", "power vs limit, W", "high", 1.0, " W", "power_limit"),
    ("temp", "temperature °C", "high", 1.0, " °C", None),
]
ROW_HEIGHT = 150
ROW_GAP = 72  # the host heading clear of the date ticks of the row above
# One line of tick labels (Plotly's default adds the date or year on a second line, under which
# the next row's title would sit): times within a day, dates beyond.
TICK_FORMATS = [{"dtickrange": [None, 86_400_000], "value": "%H:%M"},
                {"dtickrange": [86_400_000, None], "value": "%b %d"}]


def _reading(bucket, metric: str, which: str) -> float | None:
    return bucket.low(metric) if which == "low" else bucket.high(metric)


def _reasons_text(bits: int) -> str:
    return ", ".join(name for bit, name in CLOCK_REASONS.items() if bits & bit) or "none"


def _with_gaps(buckets: Sequence, width_s: int):
    """The buckets with None where the device went silent, so the silence is drawn as a gap, not
    a straight line across it: two buckets further apart than a bucket and a half and than three
    times the device's usual spacing (a GPU scraped every minute fills one 15-s bucket in four)."""
    spacing = sorted((b.start - a.start).total_seconds() for a, b in zip(buckets, buckets[1:], strict=False))
    usual = spacing[len(spacing) // 2] if spacing else width_s
    limit = max(1.5 * width_s, 3 * usual)
    out, previous = [], None
    for b in buckets:
        if previous is not None and (b.start - previous.start).total_seconds() > limit:
            out.append(None)
        out.append(b)
        previous = b
    return out


def _x(b) -> str | None:
    return b.start.isoformat() if b is not None else None


def telemetry_figure(rows: Sequence[tuple[str, Sequence[str]]], buckets: Sequence, *, colors: Mapping[str, str],
                     labels: Mapping[str, str], bucket_seconds: int,
                     mark: tuple[datetime, datetime] | None = None) -> dict:
    """Small multiples: one row per (title, devices of a host), one column per metric, a line per
    device in its own colour (the SM clock with its maximum dotted, power with its limit dotted,
    a cross where the clock-event reasons reported a slowdown). X axes are shared by all charts,
    y axes down each column, so hosts compare at a glance. `mark`: a time window shaded on every
    chart (the incident a link came from)."""
    by_device: dict[str, list] = {}
    for b in buckets:
        by_device.setdefault(b.device, []).append(b)
    if not rows or not by_device:
        return empty_figure("No device telemetry in this range")
    ncols, nrows = len(COLUMNS), len(rows)
    height = 40 + nrows * (ROW_HEIGHT + ROW_GAP)
    usable = height - 40
    span = f"{bucket_seconds // 3600} h" if bucket_seconds >= 3600 else (
        f"{bucket_seconds // 60} min" if bucket_seconds >= 60 else f"{bucket_seconds} s")
    # Which cells have data: an axis with no trace is left out (Plotly drops it, and a matched
    # axis group with a missing member autoranges to decades); its cell says "not reported".
    cells = {(r, c): [d for d in devices if any(_reading(b, metric, which) is not None for b in by_device.get(d, ()))]
             for r, (_, devices) in enumerate(rows) for c, (metric, _, which, *_) in enumerate(COLUMNS)}
    drawn = [key for key, found in cells.items() if found]
    if not drawn:
        return empty_figure("No device telemetry in this range")
    first_x = _refs(drawn[0][0] * ncols + drawn[0][1] + 1)[0]
    first_y = {c: next((_refs(r * ncols + c + 1)[1] for r, cc in drawn if cc == c), None) for c in range(ncols)}
    layout: dict = {}
    data: list[dict] = []
    annotations: list[dict] = []
    shapes: list[dict] = []
    legend_done: set[str] = set()
    for r, (title, _) in enumerate(rows):
        top = 1 - (r * (ROW_HEIGHT + ROW_GAP) + ROW_GAP - 14) / usable
        bottom = max(top - ROW_HEIGHT / usable, 0.0)
        annotations.append({"text": f"<b>{esc(title)}</b>", "showarrow": False, "xref": "paper", "yref": "paper",
                            "x": 0, "y": top + 22 / usable, "xanchor": "left", "yanchor": "bottom",
                            "font": {"size": 13}})
        for c, (metric, axis_title, which, scale, unit, companion) in enumerate(COLUMNS):
            left, right = c / ncols + 0.012, (c + 1) / ncols - 0.02
            if not cells[(r, c)]:
                annotations.append({"text": f"{esc(axis_title)}<br>not reported", "showarrow": False, "xref": "paper",
                                    "yref": "paper", "x": (left + right) / 2, "y": (top + bottom) / 2,
                                    "font": {"size": 11, "color": "#98a2b3"}})
                continue
            i = r * ncols + c + 1
            xr, yr = _refs(i)
            xk, yk = _keys(i)
            layout[xk] = {"domain": [left, right], "anchor": yr, "type": "date", "nticks": 4,
                          "tickfont": {"size": 10}, "tickformatstops": TICK_FORMATS,
                          **({"matches": first_x} if xr != first_x else {})}
            layout[yk] = {"domain": [bottom, top], "anchor": xr, "rangemode": "tozero",
                          "title": {"text": esc(axis_title), "font": {"size": 10}}, "tickfont": {"size": 10},
                          "nticks": 4, **({"matches": first_y[c]} if yr != first_y[c] else {})}
            if mark is not None:
                shapes.append({"type": "rect", "xref": xr, "yref": f"{yr} domain", "x0": mark[0].isoformat(),
                               "x1": mark[1].isoformat(), "y0": 0, "y1": 1, "line": {"width": 0},
                               "fillcolor": "rgba(196, 50, 10, 0.12)", "layer": "below"})
            for device in cells[(r, c)]:
                series = _with_gaps(by_device.get(device, ()), bucket_seconds)
                values = [_reading(b, metric, which) if b is not None else None for b in series]
                color, name = colors.get(device, "#667085"), esc(labels.get(device, device))
                show = device not in legend_done
                legend_done.add(device)
                xs = [_x(b) for b in series]
                data.append({
                    "type": "scatter", "mode": "lines", "name": name, "legendgroup": device, "showlegend": show,
                    "line": {"color": color, "width": 1.5}, "xaxis": xr, "yaxis": yr, "connectgaps": False,
                    "x": xs, "y": [v * scale if v is not None else None for v in values],
                    "hovertext": [_hover(b, device=name, metric=metric, which=which, scale=scale, unit=unit, span=span)
                                  if b is not None else "" for b in series],
                    "hoverinfo": "text",
                })
                if companion:
                    tops = [b.high(companion) if b is not None else None for b in series]
                    if any(v is not None for v in tops):
                        what = "max clock" if companion == "clock_max" else "power limit"
                        data.append({
                            "type": "scatter", "mode": "lines", "name": f"{name} {what}", "legendgroup": device,
                            "showlegend": False, "line": {"color": color, "width": 1, "dash": "dot"},
                            "xaxis": xr, "yaxis": yr, "connectgaps": False, "x": xs, "y": tops,
                            "hovertext": [f"{name}: {what} {v:,.0f}{unit}" if v is not None else "" for v in tops],
                            "hoverinfo": "text",
                        })
                if metric == "clock":
                    slowed = [b for b in series if b is not None and b.slowed and b.low("clock") is not None]
                    if slowed:
                        data.append({
                            "type": "scatter", "mode": "markers", "name": f"{name} slowdown", "legendgroup": device,
                            "showlegend": False, "xaxis": xr, "yaxis": yr,
                            "marker": {"symbol": "x", "size": 7, "color": color},
                            "x": [_x(b) for b in slowed], "y": [b.low("clock") for b in slowed],
                            "hovertext": [f"{name}: clock-event reasons {hex(b.reasons)} ({esc(_reasons_text(b.reasons))})"
                                          f" in {b.slowed} of {b.samples} readings" for b in slowed],
                            "hoverinfo": "text",
                        })
    layout.update(_layout(height=height + 20, margin={"l": 40, "r": 10, "t": 30, "b": 50}, hovermode="closest",
                          legend={"orientation": "h", "y": 1, "yanchor": "bottom", "x": 0, "font": {"size": 11}},
                          annotations=annotations, shapes=shapes, showlegend=True))
    return {"data": data, "layout": layout}


def _refs(i: int) -> tuple[str, str]:
    return ("x", "y") if i == 1 else (f"x{i}", f"y{i}")


def _keys(i: int) -> tuple[str, str]:
    return ("xaxis", "yaxis") if i == 1 else (f"xaxis{i}", f"yaxis{i}")


def _hover(b, *, device: str, metric: str, which: str, scale: float, unit: str, span: str) -> str:
    value, mean = _reading(b, metric, which), b.mean(metric)
    if value is None:
        return ""
    text = f"{device}<br>{'min' if which == 'low' else 'max'} {value * scale:,.4g}{unit}"
    if mean is not None:
        text += f", mean {mean * scale:,.4g}"
    return text + f"<br>{b.start:%b %d %H:%M} +{span}"


# --- server side vs client side ----------------------------------------------------------------

# The parts of a call, the server's first: their means add up to the client's mean duration.
SERVING_PARTS = [("queue", "queue (server)", BUDGET_COLORS["queue"]), ("prefill", "prefill (server)", BUDGET_COLORS["prefill"]),
                 ("decode", "decode (server)", BUDGET_COLORS["decode"]),
                 ("outside", "outside the server (network, client)", "#b0b7c3")]


def serving_figure(rows: Sequence, *, colors: Mapping[str, str], labels: Mapping[str, str]) -> dict:
    """Per server, where its calls' time went: the server's queue, prefill and decode and the
    time outside it (client duration − server end to end), as mean time per call stacked, with the
    client's mean TTFT marked: a TTFT far past queue + prefill is time spent outside the server."""
    rows = [r for r in rows if r.calls]
    if not rows:
        return empty_figure("No inference-server request spans in this range")
    names = [esc(r.server) for r in rows]  # category values: escaped like every rendered string
    ticks = [f'<span style="color:{colors.get(r.server, "#667085")}">■</span> {esc(labels.get(r.server, r.server))}'
             for r in rows]
    data = []
    for key, label, color in SERVING_PARTS:
        values = [max(r.mean(key), 0.0) if r.mean(key) is not None else None for r in rows]
        if not any(v is not None for v in values):
            continue
        data.append({"type": "bar", "orientation": "h", "name": esc(label), "marker": {"color": color},
                     "y": names, "x": values,
                     "hovertext": [f"{esc(labels.get(r.server, r.server))}: {esc(label)} {fmt_ms(v)} per call"
                                   f" (p50 {fmt_ms(r.p50(key))}, p95 {fmt_ms(r.p95(key))})" if v is not None else ""
                                   for r, v in zip(rows, values, strict=True)],
                     "hoverinfo": "text"})
    ttft = [r.mean("client_ttft") for r in rows]
    if any(v is not None for v in ttft):
        data.append({"type": "scatter", "mode": "markers", "name": "client TTFT", "y": names, "x": ttft,
                     "marker": {"symbol": "diamond", "size": 11, "color": "#1d2330"},
                     "hovertext": [f"{esc(labels.get(r.server, r.server))}: client TTFT {fmt_ms(v)} per call"
                                   f" (server: queue + prefill {fmt_ms((r.mean('queue') or 0) + (r.mean('prefill') or 0))})"
                                   if v is not None else "" for r, v in zip(rows, ttft, strict=True)],
                     "hoverinfo": "text"})
    return {"data": data, "layout": _layout(
        title=_title("Where a call's time goes: mean time per call, server side and outside it"), barmode="stack",
        height=120 + 34 * len(rows), margin={"l": 190, "r": 20, "t": 36, "b": 60},
        xaxis=duration_axis([sum(max(r.mean(k) or 0.0, 0.0) for k, _, _ in SERVING_PARTS) for r in rows] + ttft,
                            log=False, title={"text": "mean time per call"}, rangemode="tozero"),
        yaxis={"tickmode": "array", "tickvals": names, "ticktext": ticks, "autorange": "reversed"},
        legend={"orientation": "h", "y": -0.25, "yanchor": "top"})}
