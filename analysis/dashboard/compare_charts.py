"""Figures of the comparison pages, pure like analysis/dashboard/charts.py (whose escaping rules they
follow: every user string through `esc`, customdata only for click handlers):
- `compare_figure`: two tasks' waterfalls on one time axis (ms since each task started), one row
  per aligned step: this task's bar above, the other's below, coloured by what changed;
- `session_figure`: a session's turns on the wall clock, one bar per turn (the time the user
  waited), failed turns red, turns with findings marked."""

from __future__ import annotations

from collections.abc import Sequence

from analysis.comparison.explanation import Row
from analysis.dashboard.charts import (
    BAR_LIMIT,
    LABEL_LIMIT,
    _layout,
    empty_figure,
    esc,
    truncate,
)
from analysis.units import fmt_ms, fmt_signed_ms
from ingest.models import Task

STATUS_COLORS = {"same": "#3556d8", "slower": "#c4320a", "faster": "#0f9d76", "extra": "#e07b00",
                 "missing": "#b0b7c3"}
OTHER_COLOR = "#9aa3b2"
STATUS_WORDS = {"same": "about the same", "slower": "slower", "faster": "faster", "extra": "only in this task",
                "missing": "only in the other"}


def _row_label(row: Row) -> str:
    turn = row.turn or row.other_turn
    mark = {"extra": "+ ", "missing": "− "}.get(row.status, "")
    return f"{mark}t{turn} {esc(truncate(row.label.partition(':')[2] or row.label, 36))}"


def _hover(row: Row, *, mine: bool, other_name: str) -> str:
    parts = [f"<b>{esc(truncate(row.label, 80))}</b> · {STATUS_WORDS[row.status]}"]
    if row.duration_ms is not None:
        parts.append(f"this task: {fmt_ms(row.duration_ms)} at +{fmt_ms(row.start_ms)} (turn {row.turn})")
    if row.other_duration_ms is not None:
        parts.append(f"{esc(other_name)}: {fmt_ms(row.other_duration_ms)} at +{fmt_ms(row.other_start_ms)}"
                     f" (turn {row.other_turn})")
    if row.duration_ms is not None and row.other_duration_ms is not None:
        delta = row.duration_ms - row.other_duration_ms
        parts.append(f"Δ {fmt_signed_ms(delta)}")
    return "<br>".join(parts)


def compare_figure(rows: Sequence[Row], *, other_name: str = "the other task") -> dict:
    """customdata = [this task's step id, the other's step id] of each row."""
    if not rows:
        return empty_figure("Neither task has steps")
    use_gl = len(rows) > BAR_LIMIT
    data = []
    for mine in (True, False):
        idx = [i for i, r in enumerate(rows) if (r.duration_ms if mine else r.other_duration_ms) is not None]
        if not idx:
            continue
        offset = -0.2 if mine else 0.2
        starts = [(rows[i].start_ms if mine else rows[i].other_start_ms) or 0.0 for i in idx]
        lengths = [(rows[i].duration_ms if mine else rows[i].other_duration_ms) or 0.0 for i in idx]
        colors = [STATUS_COLORS[rows[i].status] if mine else OTHER_COLOR for i in idx]
        common = {"name": "this task" if mine else esc(other_name),
                  "customdata": [[rows[i].step_id, rows[i].other_step_id] for i in idx],
                  "hovertext": [_hover(rows[i], mine=mine, other_name=other_name) for i in idx],
                  "hoverinfo": "text"}
        if use_gl:
            data.append({"type": "scattergl", "mode": "markers", **common,
                         "x": [round(s + d / 2, 3) for s, d in zip(starts, lengths, strict=True)],
                         "y": [i + offset for i in idx],
                         "error_x": {"type": "data", "symmetric": True, "width": 0, "thickness": 4,
                                     "color": OTHER_COLOR if not mine else "#3556d8",
                                     "array": [round(d / 2, 3) for d in lengths]},
                         "marker": {"color": colors, "size": 3}})
        else:
            data.append({"type": "bar", "orientation": "h", "width": 0.36, **common,
                         "y": [i + offset for i in idx], "base": [round(s, 3) for s in starts],
                         "x": [max(round(d, 3), 0.001) for d in lengths], "marker": {"color": colors}})
    n = len(rows)
    yaxis = {"autorange": "reversed", "zeroline": False, "showgrid": False}
    if n <= LABEL_LIMIT:
        yaxis.update(tickmode="array", tickvals=list(range(n)), ticktext=[_row_label(r) for r in rows],
                     automargin=True)
    else:
        yaxis.update(showticklabels=False, title={"text": f"{n} aligned steps"})
    layout = _layout(barmode="overlay", height=max(160, min(n * 26, 1000)) + 80, dragmode="zoom",
                     legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
                     margin={"l": 20, "r": 20, "t": 30, "b": 40},
                     xaxis={"title": {"text": "ms since each task started"}, "zeroline": False}, yaxis=yaxis)
    layout["meta"] = {"rows": n, "webgl": use_gl}
    return {"data": data, "layout": layout}


def session_figure(turns: Sequence) -> dict:
    """`turns`: sessions.TurnRow. customdata = task id (a click opens the task)."""
    turns = [t for t in turns if t.task.started_at is not None]
    if not turns:
        return empty_figure("This session has no turns in range")
    colors = ["#c4320a" if t.task.status in Task.FAILED_STATUSES else ("#7a4cc2" if t.running else "#3556d8")
              for t in turns]
    hover = []
    for t in turns:
        lines = [f"<b>turn {t.number}: {esc(truncate(t.task.name or t.task.task_id, 60))}</b>",
                 f"waited {fmt_ms(t.waited_ms)} · {esc(t.task.status or ('running' if t.running else '–'))}"]
        counted = [f for f in t.findings if f.is_counted]
        lines += [f"{esc(f.kind)}: {esc(truncate(f.summary, 100))}" for f in counted[:3]]
        hover.append("<br>".join(lines))
    data = [{
        "type": "bar", "orientation": "h", "name": "turns", "marker": {"color": colors},
        "y": [f"turn {t.number}" for t in turns], "base": [t.task.started_at.isoformat() for t in turns],
        "x": [max(t.waited_ms or 0.0, 1.0) for t in turns],
        "customdata": [t.task.task_id for t in turns], "hovertext": hover, "hoverinfo": "text",
    }]
    flagged = [t for t in turns if any(f.is_counted for f in t.findings)]
    if flagged:
        data.append({"type": "scatter", "mode": "markers", "name": "findings",
                     "y": [f"turn {t.number}" for t in flagged],
                     "x": [t.task.ended_at.isoformat() if t.task.ended_at else t.task.started_at.isoformat()
                           for t in flagged],
                     "marker": {"symbol": "diamond", "color": "#c4320a", "size": 11, "line": {"color": "#fff", "width": 1}},
                     "customdata": [t.task.task_id for t in flagged],
                     "hovertext": [hover[turns.index(t)] for t in flagged], "hoverinfo": "text"})
    return {"data": data, "layout": _layout(
        height=max(160, min(len(turns) * 28, 900)) + 80, barmode="overlay", showlegend=False,
        margin={"l": 70, "r": 20, "t": 20, "b": 40},
        xaxis={"type": "date", "title": {"text": "time"}},
        yaxis={"autorange": "reversed", "type": "category"})}
