"""Every chart builder's figure dict is a valid Plotly figure: built with realistic data and
handed to plotly.graph_objects.Figure, which refuses an unknown or mistyped property (a figure
that Plotly.js would silently not draw fails here instead)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import numpy as np
import plotly.graph_objects as go
import pytest

from analysis.alerts import charts as alert_charts
from analysis.comparison.explanation import Row
from analysis.dashboard import charts, compare_charts, device_charts
from analysis.dashboard.charts import FindingTotal, SamplePoint, SeriesPoint, StepRow
from analysis.releases import charts as release_charts
from analysis.rollups import SampleBucket

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
RNG = np.random.default_rng(7)


def _series() -> list[SeriesPoint]:
    points = []
    for h in range(24):
        start, end = T0 + timedelta(hours=h), T0 + timedelta(hours=h + 1)
        for release in ("v1", "v2", "<b>v3</b>"):
            points.append(SeriesPoint(start.isoformat(), end.isoformat(), release, 40 + h, h % 3,
                                      900.0 + h, 2400.0 + 10 * h, 5100.0 + 20 * h))
    points.append(SeriesPoint(T0.isoformat(), (T0 + timedelta(hours=1)).isoformat(), "(other)", 5, 0, None, None, None))
    return points


def _steps(n: int) -> list[StepRow]:
    rows = [StepRow("root", "", 0, "agent", "checkout", 0.0, n * 10.0 + 10)]
    for i in range(n):
        kind = ("llm", "tool", "retrieval", "framework")[i % 4]
        rows.append(StepRow(f"s{i}", "root", 1, kind, f"step {i}", 10.0 * i, 9.0 + (i % 7),
                            status="error" if i % 13 == 0 else "ok",
                            model="llama-3.1-70b" if kind == "llm" else "", device="groq-1" if kind == "llm" else "",
                            ttft_ms=120.0 if kind == "llm" else None,
                            input_tokens=1200 if kind == "llm" else None, output_tokens=80 if kind == "llm" else None,
                            tool_name="search_orders" if kind == "tool" else "",
                            tool_args='{"q": "<img src=x>"}' if kind == "tool" else "",
                            error="timeout" if i % 13 == 0 else ""))
    return rows


def _lane(devices=("groq-1", "gpu-0")) -> list[SamplePoint]:
    return [SamplePoint(d, 100.0 * k, {"queue_depth": float(k % 5), "utilization": 0.4 + (k % 5) / 10,
                                       "temperature_c": 60.0 + k % 9, "throttled": float(k % 11 == 0)})
            for d in devices for k in range(40)]


def _buckets() -> list[SampleBucket]:
    """A server's and its GPU's readings: the server reports its queue, the GPU clock, power, heat."""
    out = []
    for k in range(30):
        start = T0 + timedelta(minutes=5 * k)
        server = {"queue": (10, 20.0 + k, 0.0, 5.0 + k), "running": (10, 40.0, 2.0, 6.0), "kv": (10, 5.0, 0.4, 0.6)}
        gpu = {"clock": (10, 19000.0, 1100.0 if k == 7 else 1900.0, 1980.0), "clock_max": (10, 19800.0, 1980.0, 1980.0),
               "power": (10, 5000.0, 400.0, 600.0), "power_limit": (10, 7000.0, 700.0, 700.0),
               "temp": (10, 600.0, 55.0, 65.0)}
        empty = (0, None, None, None)
        metrics = ("util", "queue", "running", "kv", "clock", "clock_max", "power", "power_limit", "temp")
        out.append(SampleBucket("vllm-<1>:8000", start, 10, {m: server.get(m, empty) for m in metrics}, 0, 0))
        out.append(SampleBucket("GPU-<b>", start, 10, {m: gpu.get(m, empty) for m in metrics},
                                0x88 if k == 7 else 0, 3 if k == 7 else 0))
    return out


def _serving_rows():
    from analysis.dashboard.devices import ServingRow

    figures = {n: (100.0, 300.0, 150.0) for n in ("queue", "prefill", "decode", "server_ttft", "e2e", "client_ttft",
                                                  "client_ms", "client_tpot", "server_tpot", "outside")}
    return [ServingRow("vllm-<1>:8000", 40, 38, T0, T0 + timedelta(hours=1), figures),
            ServingRow("gpu-0:8000", 12, 12, T0, T0 + timedelta(hours=1), {**figures, "queue": (None, None, None)})]


def _ecdf(labels=("tasks",)):
    fractions = tuple(i / 100 for i in range(101))
    return [(label, fractions, sorted(RNG.lognormal(7, 0.5, 101).tolist())) for label in labels]


def _compare_rows(n: int) -> list[Row]:
    statuses = ("same", "slower", "faster", "extra", "missing")
    rows = []
    for i in range(n):
        status = statuses[i % 5]
        mine = status != "missing"
        other = status != "extra"
        rows.append(Row(status, f"llm:chat <{i}>", 1 + i // 10 if mine else None, 1 + i // 10 if other else None,
                        f"s{i}" if mine else "", f"o{i}" if other else "", 100.0 * i if mine else None,
                        80.0 + i if mine else None, 90.0 * i if other else None, 60.0 + i if other else None,
                        "llm" if i % 2 else "tool"))
    return rows


def _turns():
    finding = SimpleNamespace(is_counted=True, kind="serial_gap", summary="idle <1.2 s>")
    out = []
    for i in range(12):
        start = T0 + timedelta(minutes=3 * i)
        task = SimpleNamespace(task_id=f"t{i}", name="<b>support</b>", status="error" if i == 4 else "ok",
                               started_at=start, ended_at=start + timedelta(seconds=5 + i))
        out.append(SimpleNamespace(task=task, number=i + 1, waited_ms=5000.0 + 1000 * i, running=i == 11,
                                   findings=[finding] if i % 3 == 0 else []))
    return out


def _attribution_rows():
    return [{"key": f"tool:search_{i}", "contribution_ms": (-1) ** i * 40.0 * i} for i in range(12)]


BUILDERS = {
    "empty": lambda: charts.empty_figure("No tasks in this range"),
    "volume": lambda: charts.volume_figure(_series()),
    "error_rate": lambda: charts.error_rate_figure(_series()),
    "percentiles": lambda: charts.percentile_figure(_series()),
    "top_findings": lambda: charts.top_findings_figure([FindingTotal("repeated_tool_call", 40, 31, 51_000.0),
                                                        FindingTotal("serial_gap", 12, 12, 9_000.0)]),
    "budget": lambda: charts.budget_figure([("v1", {"prefill": 300.0, "decode": 900.0, "tool": 1200.0,
                                                    "framework": 80.0, "custom": 5.0}),
                                            ("v2", {"prefill": 280.0, "decode": 850.0, "tool": 1500.0})],
                                           title="Latency budget"),
    "histogram": lambda: charts.histogram_figure([(100.0, 125.9, 4), (125.9, 158.5, 17), (158.5, 199.5, 9),
                                                  (1e6, 1e7, 1)], title="Task duration"),
    "histogram_unclickable": lambda: charts.histogram_figure([(10.0, 12.6, 3)], title="Steps", clickable=False),
    "ecdf": lambda: charts.ecdf_figure(_ecdf(("llama-3.1-70b", "mixtral", "<i>x</i>")), title="ECDF by model"),
    "device_telemetry": lambda: device_charts.telemetry_figure(
        [("host <1>", ["vllm-<1>:8000", "GPU-<b>"])], _buckets(), colors={"vllm-<1>:8000": "#3556d8"},
        labels={}, bucket_seconds=300, mark=(T0 + timedelta(minutes=30), T0 + timedelta(minutes=40))),
    "device_serving": lambda: device_charts.serving_figure(_serving_rows(), colors={}, labels={}),
    "waterfall": lambda: charts.waterfall_figure(_steps(60), critical_path=["root", "s0", "s4"],
                                                 findings={"s1": ["repeated_tool_call: search twice"]},
                                                 possible={"s2": ["parallelizable_calls: maybe"]},
                                                 samples=_lane()),
    "waterfall_collapsed": lambda: charts.waterfall_figure(_steps(60), mode="top"),
    "waterfall_webgl": lambda: charts.waterfall_figure(_steps(3000), mode="all",
                                                       findings={"s9": ["slow_step: 3× its baseline"]}),
    "release_ecdf": lambda: release_charts.ecdf_figure([("a", "v1", np.sort(RNG.lognormal(7, 0.4, 500))),
                                                        ("b", "v2", np.sort(RNG.lognormal(7.1, 0.4, 500)))]),
    "release_histogram": lambda: release_charts.histogram_figure(
        [("a", "v1", RNG.lognormal(7, 0.4, 500)), ("b", "v2", RNG.lognormal(7.1, 0.4, 500))]),
    "release_contribution": lambda: release_charts.contribution_figure(_attribution_rows()),
    "compare": lambda: compare_charts.compare_figure(_compare_rows(40), other_name="typical <run>"),
    "compare_webgl": lambda: compare_charts.compare_figure(_compare_rows(2000)),
    "session": lambda: compare_charts.session_figure(_turns()),
    "alert_metric": lambda: alert_charts.metric_figure(
        times=[T0 + timedelta(minutes=m) for m in range(30)], values=[4000.0 + 10 * m for m in range(30)],
        threshold=4200.0, title="checkout p95", unit="ms",
        evaluated=[((T0 + timedelta(minutes=m)).isoformat(), 4100.0) for m in range(0, 30, 5)]),
}


@pytest.mark.parametrize("name", sorted(set(BUILDERS) - {"empty"}))
def test_every_chart_builder_makes_a_valid_plotly_figure_that_draws_its_data(name):
    figure = BUILDERS[name]()
    validated = go.Figure(figure).to_dict()  # raises ValueError on an invalid property or value
    # Given realistic data, every builder draws it: traces with points, not a blank chart or the
    # empty/error figure's lone message.
    assert validated["data"], (name, [a.get("text") for a in validated["layout"].get("annotations", [])])
    for trace in validated["data"]:
        xs, ys = list(trace.get("x", [])), list(trace.get("y", []))
        assert xs and len(xs) == len(ys), (name, trace.get("name"), len(xs), len(ys))
        assert any(v is not None for v in xs) and any(v is not None for v in ys), (name, trace.get("name"))


def test_the_empty_figure_says_why_and_draws_nothing():
    validated = go.Figure(BUILDERS["empty"]()).to_dict()
    assert validated["data"] == []
    assert [a["text"] for a in validated["layout"]["annotations"]] == ["No tasks in this range"]


def test_an_invalid_property_fails_the_validation():
    figure = charts.volume_figure(_series())
    figure["data"][0]["colour"] = "red"
    with pytest.raises(ValueError, match="colour"):
        go.Figure(figure)
    figure = charts.volume_figure(_series())
    figure["layout"]["xaxis"] = {"type": "logarithmic"}
    with pytest.raises(ValueError):
        go.Figure(figure)


def test_the_list_names_every_builder():
    """A new chart builder gets a row above: every public *_figure function is listed."""
    import inspect

    built = {f"{m.__name__}.{n}" for m in (charts, release_charts, alert_charts, compare_charts, device_charts)
             for n, f in inspect.getmembers(m, inspect.isfunction) if n.endswith("_figure") and f.__module__ == m.__name__}
    covered = {"analysis.dashboard.charts.empty_figure", "analysis.dashboard.charts.volume_figure", "analysis.dashboard.charts.error_rate_figure",
               "analysis.dashboard.charts.percentile_figure", "analysis.dashboard.charts.top_findings_figure",
               "analysis.dashboard.charts.budget_figure", "analysis.dashboard.charts.histogram_figure", "analysis.dashboard.charts.ecdf_figure",
               "analysis.dashboard.device_charts.telemetry_figure", "analysis.dashboard.device_charts.serving_figure",
               "analysis.dashboard.charts.waterfall_figure",
               "analysis.releases.charts.ecdf_figure", "analysis.releases.charts.histogram_figure",
               "analysis.releases.charts.contribution_figure", "analysis.alerts.charts.metric_figure",
               "analysis.dashboard.compare_charts.compare_figure", "analysis.dashboard.compare_charts.session_figure"}
    assert built == covered, built ^ covered
