"""Chart builders, checked on the figure dicts they return (no database, no browser)."""

from __future__ import annotations

import json

from analysis.dashboard import charts
from analysis.dashboard.charts import FindingTotal, SamplePoint, SeriesPoint, StepRow

XSS = '"><img src=x onerror=alert(1)><script>alert(2)</script>'


def rendered_text(figure: dict) -> str:
    """Every string Plotly renders as pseudo-HTML: names, hover text, tick labels, titles."""
    out = []
    for trace in figure["data"]:
        out.append(str(trace.get("name", "")))
        for key in ("hovertext", "text"):
            value = trace.get(key)
            out += value if isinstance(value, list) else [str(value or "")]
        if trace.get("orientation") == "h" or trace.get("type") == "bar":
            out += [str(v) for v in trace.get("y", []) if isinstance(v, str)]
    layout = figure["layout"]
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")):
            out += [str(t) for t in axis.get("ticktext", [])]
    out += [a.get("text", "") for a in layout.get("annotations", [])]
    out.append(str(layout.get("title", {}).get("text", "")))
    return "\n".join(out)


def assert_no_raw_html(figure: dict) -> None:
    text = rendered_text(figure)
    assert "<img" not in text and "<script" not in text, text
    assert "&lt;img" in text or "&lt;script" in text


def chain(n: int, **extra) -> list[StepRow]:
    """A root with n children, 100 ms each, back to back."""
    rows = [StepRow("root", "", 0, "agent", "run", 0.0, n * 100.0)]
    rows += [StepRow(f"s{i}", "root", 1, "tool" if i % 2 else "llm", f"step {i}", i * 100.0, 100.0, **extra)
             for i in range(n)]
    return rows


def test_esc_neutralises_plotly_pseudo_html():
    assert charts.esc("<b>&</b>") == "&lt;b&gt;&amp;&lt;/b&gt;"
    assert charts.esc(5) == "5"


def test_percentile_chart_draws_each_percentile_per_release_and_carries_the_drill_down():
    points = [SeriesPoint("2026-11-01T10:00:00+00:00", "2026-11-01T11:00:00+00:00", "v1", 10, 1, 100.0, 400.0, 900.0),
              SeriesPoint("2026-11-01T10:00:00+00:00", "2026-11-01T11:00:00+00:00", XSS, 5, 0, 80.0, 300.0, 700.0)]
    fig = charts.percentile_figure(points)
    names = [t["name"] for t in fig["data"]]
    assert "v1 p99" in names and "v1 p50" in names and len(names) == 6
    p99 = next(t for t in fig["data"] if t["name"] == "v1 p99")
    assert p99["y"] == [900.0]
    # customdata keeps the raw release (for the URL), never referenced by a hover template
    assert p99["customdata"] == [["v1", "2026-11-01T10:00:00+00:00", "2026-11-01T11:00:00+00:00", 900.0]]
    assert all("hovertemplate" not in t for t in fig["data"])
    assert_no_raw_html(fig)


def test_volume_and_error_rate_per_release():
    points = [SeriesPoint("a", "b", "v1", 10, 2, 1, 2, 3), SeriesPoint("c", "d", "v1", 4, 0, 1, 2, 3)]
    vol = charts.volume_figure(points)
    assert vol["data"][0]["y"] == [10, 4]
    err = charts.error_rate_figure(points)
    assert err["data"][0]["y"] == [20.0, 0.0]


def test_top_findings_biggest_waste_on_top_with_kind_for_the_click():
    fig = charts.top_findings_figure([FindingTotal("slow_step", 3, 2, 5000.0),
                                      FindingTotal("repeated_tool_call", 9, 4, 12000.0)])
    bar = fig["data"][0]
    # horizontal bars are drawn bottom-up: the last is the top one
    assert bar["customdata"][-1] == "repeated_tool_call"
    assert bar["x"][-1] == 12000.0  # ms, on an axis ticked like every duration
    assert "10 s" in fig["layout"]["xaxis"]["ticktext"]


def test_budget_stacks_categories_in_a_fixed_order_and_skips_empty_ones():
    fig = charts.budget_figure([("v1", {"tool": 300.0, "prefill": 100.0, "queue": 0}),
                                ("v2", {"tool": 100.0, "prefill": 50.0})], title="b")
    assert [t["name"] for t in fig["data"]] == ["prefill", "tool"]
    assert fig["data"][1]["x"] == [300.0, 100.0]
    assert fig["layout"]["barmode"] == "stack"
    assert charts.budget_figure([], title="b")["data"] == []


def test_histogram_bars_sit_on_a_log_axis_and_carry_their_bounds():
    edges = charts.log_edges()
    assert edges[0] == 0.1 and 1000.0 in edges and edges == sorted(edges)
    fig = charts.histogram_figure([(100.0, 125.9, 4), (1000.0, 1259.0, 1)], title="t")
    bar = fig["data"][0]
    assert bar["customdata"] == [[100.0, 125.9], [1000.0, 1259.0]]
    assert bar["x"][0] > 2 and bar["x"][1] > 3  # log10 of the bucket's centre
    # ticks at 1-2-5 steps over the buckets, in the one duration format
    assert fig["layout"]["xaxis"]["ticktext"] == ["100 ms", "200 ms", "500 ms", "1 s"]


def test_ecdf_uses_a_log_axis_and_escapes_labels():
    fig = charts.ecdf_figure([(XSS, [0.0, 0.5, 1.0], [10.0, 20.0, 40.0])], title="t")
    assert fig["layout"]["xaxis"]["type"] == "log"
    assert fig["data"][0]["y"] == [0.0, 0.5, 1.0]
    assert_no_raw_html(fig)


def test_waterfall_has_one_bar_per_step_coloured_by_kind():
    rows = chain(6)
    fig = charts.waterfall_figure(rows)
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert sum(len(t["y"]) for t in bars) == 7
    assert {t["name"] for t in bars} == {"agent", "llm", "tool"}
    tool = next(t for t in bars if t["name"] == "tool")
    assert tool["base"] == [100.0, 300.0, 500.0] and tool["x"] == [100.0, 100.0, 100.0]
    assert fig["layout"]["yaxis"]["autorange"] == "reversed"
    assert len(fig["layout"]["yaxis"]["ticktext"]) == 7


def test_waterfall_marks_the_critical_path_and_findings_on_their_steps():
    rows = chain(4)
    fig = charts.waterfall_figure(rows, critical_path=["root", "s2"], findings={"s3": ["slow_step: 3x slower"]})
    crit = next(t for t in fig["data"] if t["name"] == "critical path")
    assert crit["customdata"] == ["root", "s2"]
    llm = next(t for t in fig["data"] if t["name"] == "llm")  # s0, s2
    assert llm["marker"]["line"]["width"] == [0, 2]
    flags = next(t for t in fig["data"] if t["name"] == "findings")
    assert flags["customdata"] == ["s3"] and flags["y"] == [4]
    assert flags["x"] == [400.0]  # drawn at the end of the step
    assert "3x slower" in flags["hovertext"][0]


def test_a_possible_finding_is_a_faint_diamond_and_joins_a_sure_one_on_the_same_step():
    rows = chain(4)
    fig = charts.waterfall_figure(rows, findings={"s3": ["slow_step: 3x slower"]},
                                  possible={"s1": ["parallelizable_calls: one after the other — possible: no call ids"],
                                            "s3": ["repeated_tool_call: maybe again — possible: args differ"]})
    sure = next(t for t in fig["data"] if t["name"] == "findings")
    faint = next(t for t in fig["data"] if t["name"] == "possible findings")
    assert sure["customdata"] == ["s3"] and sure.get("opacity", 1) == 1
    assert faint["customdata"] == ["s1"] and faint["opacity"] < 1 and faint["marker"]["symbol"] == "diamond-open"
    assert "possible: no call ids" in faint["hovertext"][0]
    assert "3x slower" in sure["hovertext"][0] and "maybe again" in sure["hovertext"][0]


def test_waterfall_hover_escapes_names_tool_args_and_findings():
    rows = [StepRow("a", "", 0, "tool", XSS, 0.0, 5.0, tool_name="<b>t</b>", tool_args=XSS, error=XSS)]
    fig = charts.waterfall_figure(rows, findings={"a": [XSS]}, critical_path=["a"])
    assert_no_raw_html(fig)
    assert_no_raw_html(charts.waterfall_figure(rows, possible={"a": [XSS]}))
    json.dumps(fig)  # serialisable as is


def test_big_task_opens_with_the_first_level_and_findings_move_to_the_visible_ancestor():
    rows = [StepRow("root", "", 0, "agent", "run", 0.0, 1e5)]
    for turn in range(10):
        rows.append(StepRow(f"t{turn}", "root", 1, "agent", f"turn {turn}", turn * 1e4, 1e4))
        rows += [StepRow(f"t{turn}.{i}", f"t{turn}", 2, "tool", "call", turn * 1e4 + i, 1.0) for i in range(250)]
    assert len(rows) > charts.BIG_TASK_STEPS
    fig = charts.waterfall_figure(rows, findings={"t3.7": ["repeated_tool_call: again"]})
    meta = fig["layout"]["meta"]
    assert meta["mode"] == "top" and meta["visible"] == 11 and len(meta["collapsed"]) == 10
    flags = next(t for t in fig["data"] if t["name"] == "findings")
    assert flags["customdata"] == ["t3"]
    assert "▸" in fig["layout"]["yaxis"]["ticktext"][4]
    # opening one subtree shows its 250 steps; revealing a step opens its ancestors
    opened = charts.waterfall_figure(rows, toggled=["t3"])
    assert opened["layout"]["meta"]["visible"] == 261
    assert charts.reveal(rows, mode="top", toggled=[], step_id="t5.1") == ["t5"]
    assert charts.reveal(rows, mode="top", toggled=["t5"], step_id="t5.1") == ["t5"]


def test_waterfall_switches_to_webgl_beyond_the_bar_limit():
    rows = chain(charts.BAR_LIMIT + 10)
    fig = charts.waterfall_figure(rows, mode="all")
    traces = [t for t in fig["data"] if t["name"] in ("llm", "tool", "agent")]
    assert {t["type"] for t in traces} == {"scattergl"}
    assert sum(len(t["x"]) for t in traces) == len(rows)
    tool = next(t for t in traces if t["name"] == "tool")
    # one marker per step at its middle, the error bar spans the step
    assert tool["x"][0] == 150.0 and tool["error_x"]["array"][0] == 50.0
    assert fig["layout"]["yaxis"]["showticklabels"] is False


def test_deep_chain_does_not_recurse():
    rows = [StepRow(f"s{i}", f"s{i - 1}" if i else "", i, "llm", "x", float(i), 1.0) for i in range(5000)]
    assert charts.subtree_sizes(rows)[0] == 4999
    fig = charts.waterfall_figure(rows, mode="all")
    assert fig["layout"]["meta"]["visible"] == 5000


def test_device_lane_shares_the_waterfall_x_axis_on_its_own_y_axes():
    samples = [SamplePoint("groq-<1>", -30_000.0, {"queue_depth": 1}),
               SamplePoint("groq-<1>", 0.0, {"queue_depth": 3, "utilization": 0.9, "temperature_c": 70, "throttled": 0}),
               SamplePoint("groq-<1>", 50.0, {"queue_depth": 9, "utilization": 1.0, "temperature_c": 71, "throttled": 1})]
    fig = charts.waterfall_figure(chain(2), samples=samples)
    lane = [t for t in fig["data"] if t.get("yaxis")]
    assert {t["yaxis"] for t in lane} == {"y2", "y3", "y4", "y5"}
    assert all("xaxis" not in t for t in fig["data"])  # everything on the one x axis
    queue = next(t for t in lane if t["yaxis"] == "y2")
    assert queue["y"] == [1, 3, 9] and queue["name"] == "groq-&lt;1&gt;"
    assert fig["layout"]["yaxis"]["domain"][0] > fig["layout"]["yaxis2"]["domain"][1]
    # the x range is the task's span, not the samples' wider one
    assert fig["layout"]["xaxis"]["range"][0] < 0 < 200 < fig["layout"]["xaxis"]["range"][1] < 210


def test_the_device_lane_draws_only_what_the_devices_report():
    """A vLLM server reports its queue and KV cache, its GPU (dcgm-exporter) the SM clock: three
    bands, none left empty for a field no exporter sent (the native `throttled`), the time
    axis under the lowest."""
    samples = [SamplePoint("vllm-1:8000", 0.0, {"queue_depth": 2, "kv_cache_usage": 0.4}),
               SamplePoint("vllm-1:8000", 50.0, {"queue_depth": 30, "kv_cache_usage": 0.97}),
               SamplePoint("gpu-0", 20.0, {"sm_clock_mhz": 570.0, "utilization": None})]
    fig = charts.waterfall_figure(chain(2), samples=samples)
    titles = [fig["layout"][f"yaxis{i}"]["title"]["text"] for i in range(2, 5)]
    assert titles == ["queue", "KV cache", "SM MHz"] and "yaxis5" not in fig["layout"]
    assert {t["yaxis"]: t["name"] for t in fig["data"] if t.get("yaxis")} == {
        "y2": "vllm-1:8000", "y3": "vllm-1:8000", "y4": "gpu-0"}
    assert fig["layout"]["xaxis"]["anchor"] == "y4"
    # Each device once in the legend (the GPU first drawn in the third band), clocks in plain digits.
    assert sorted(t["name"] for t in fig["data"] if t.get("yaxis") and t["showlegend"]) == ["gpu-0", "vllm-1:8000"]
    assert fig["layout"]["yaxis4"]["ticktext"] == ["0", "570"]
    big = charts.waterfall_figure(chain(2), samples=[SamplePoint("gpu-0", 0.0, {"sm_clock_mhz": 1940.0})])
    assert big["layout"]["yaxis2"]["ticktext"] == ["0", "1,940"]
    assert fig["layout"]["xaxis"]["title"]["text"] == "time since task start"  # its ticks read ms or s
    # Devices that report none of the lane's fields draw no lane at all.
    bare = charts.waterfall_figure(chain(2), samples=[SamplePoint("d", 0.0, {"utilization": None})])
    assert "yaxis2" not in bare["layout"] and not any(t.get("yaxis") for t in bare["data"])


def test_durations_read_naturally():
    assert [charts.fmt_ms(v) for v in (None, 12.34, 1500, -10941.9, 90_000)] == [
        "–", "12.3 ms", "1.5 s", "-10.9 s", "90 s"]


def test_empty_inputs_give_a_message_not_an_error():
    for fig in (charts.volume_figure([]), charts.percentile_figure([]), charts.top_findings_figure([]),
                charts.histogram_figure([], title="x"), charts.ecdf_figure([], title="x"),
                charts.waterfall_figure([])):
        assert fig["data"] == [] and fig["layout"]["annotations"]


def test_a_drill_down_threshold_is_whole_milliseconds_rounded_down():
    """Issue #27.7: a click on a p99 point wrote "25904.29315487388" into the Duration box."""
    points = [SeriesPoint("2026-11-01T10:00:00+00:00", "2026-11-01T11:00:00+00:00", "v1", 10, 1, 100.0, 400.0,
                          25904.29315487388)]
    p99 = next(t for t in charts.percentile_figure(points)["data"] if t["name"] == "v1 p99")
    assert p99["customdata"][0][3] == 25904
    assert p99["y"] == [25904.29315487388]  # the line is drawn where it is
    assert charts.lower_bound_ms(999.9999) == 999 and charts.lower_bound_ms(None) is None
