"""The overview's culprits (analysis/dashboard/aggregates.py): the period before a range, and the
critical-path time of one project's tasks only."""

from __future__ import annotations

from datetime import timedelta

from analysis.dashboard import aggregates
from analysis.filters import TaskFilters
from tests.analysis.factories import T0, analyse, make_step, make_task


def test_the_period_before_a_range_has_its_length_and_all_time_has_none():
    earlier = aggregates.previous_period(TaskFilters(release="v2", since=T0, until=T0 + timedelta(hours=6)))
    assert (earlier.since, earlier.until, earlier.release) == (T0 - timedelta(hours=6), T0, "v2")
    assert aggregates.previous_period(TaskFilters()) is None


def test_critical_path_time_counts_the_path_of_this_projects_tasks_only(project, other_project):
    for p, tool in ((project, "search"), (other_project, "secret_tool")):
        task = make_task(p, f"{p.name}-t")
        make_step(task, "llm", kind="llm", model="m", device="gpu-1", duration_ms=300.0)
        make_step(task, "call", kind="tool", tool_name=tool, offset_ms=300.0, duration_ms=200.0)
        make_step(task, "off", kind="tool", tool_name="off_path", duration_ms=50.0)
        analyse(task, critical_path=["llm", "call"])
    found = aggregates.critical_path_time(project=project, filters=TaskFilters())
    assert found["tasks"] == 1 and found["total_ms"] == 500.0
    assert [(r["name"], r["ms"], r["share_pct"]) for r in found["tool"]] == [("search", 200.0, 40.0)]
    assert [r["name"] for r in found["model"]] == ["m"] and [r["name"] for r in found["device"]] == ["gpu-1"]
