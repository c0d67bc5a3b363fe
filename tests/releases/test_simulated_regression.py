"""The acceptance check of release comparison on the traffic `make demo` simulates (same size,
period and seed as demo_setup): the simulator's third release makes one tool (`search_inventory`)
twice as slow; comparing it with the second must flag the task name that calls that tool and
put that tool's step on top of "where it changed"."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from analysis.releases.compare import release_compare
from analysis.simulator.catalog import REGRESSED_TOOL
from ingest.models import Project, Step
from tests.conftest import faults_pass

pytestmark = pytest.mark.django_db


@faults_pass
def test_compare_finds_the_simulated_tool_regression_and_names_its_step_first():
    call_command("simulate", "--tasks", "3000", "--project", "sim", "--seed", "7", "--since", "7d",
                 "--until", "2026-11-01T00:00:00Z", stdout=StringIO(), stderr=StringIO(), verbosity=0)
    project = Project.objects.get(name="sim")
    report = release_compare(project=project, a="v2", b="v3").report
    top = report["attribution"]["steps"][0]
    step_names = set(Step.objects.filter(project=project, tool_name=REGRESSED_TOOL)
                     .values_list("name", flat=True))
    assert top["key"] in {f"tool:{name}" for name in step_names}
    assert top["significant"] and top["contribution_ms"] > 0
    assert report["attribution"]["tools"][0]["key"] == REGRESSED_TOOL
    assert top["p50_b_ms"] == pytest.approx(2 * top["p50_a_ms"], rel=0.3)
    using_tool = set(Step.objects.filter(project=project, tool_name=REGRESSED_TOOL, task__release="v3")
                     .values_list("task__name", flat=True))
    assert [s["key"] for s in report["slower_steps"]] == [top["key"]]
    # End to end, only task names that call the tool got slower; none of the others regressed.
    rows = {row["name"]: row for row in report["tasks"]}
    assert all(not row["regressed"] for name, row in rows.items() if name not in using_tool)
    for name in using_tool:
        p50 = next(p for p in rows[name]["percentiles"] if p["q"] == 50)
        assert p50["delta_ms"] > 0, rows[name]["verdict"]
