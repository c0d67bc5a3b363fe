"""Dashboard pages, chart JSON and CSV exports through the Django test client: login, project
isolation, filters in the URL, drill-downs, escaping of hostile trace content."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from ingest.models import Device, ResourceSample
from tests.analysis.factories import T0, analyse, make_finding, make_step, make_task

XSS_NAME = "<script>window.pwned=1</script>"
XSS_ARG = '"><img src=x onerror=alert(1)>'


@pytest.fixture
def user(project):
    user = get_user_model().objects.create_user("ana", password="pw")
    project.members.add(user)
    return user


@pytest.fixture
def client(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def spread(project):
    """Ten tasks 100 ms … 1000 ms, one erroring, in two releases, one minute apart."""
    tasks = []
    for i in range(10):
        tasks.append(make_task(project, f"t{i}", duration_ms=100.0 * (i + 1), release="v1" if i < 5 else "v2",
                               status="error" if i == 9 else "ok", start=T0 + timedelta(minutes=i)))
    return tasks


def page(client, url, **params):
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def charts_json(client, url, **params):
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:500]
    return response.json()


# --- access ----------------------------------------------------------------------------------


PAGES = ["/", "/tasks", "/tasks/t1", "/tasks/t1/waterfall.json", "/tasks/t1/steps/s1.json", "/latency",
         "/devices", "/charts/overview.json", "/charts/latency.json", "/charts/devices.json", "/tasks.csv",
         "/findings.csv"]


@pytest.mark.django_db
@pytest.mark.parametrize("url", PAGES)
def test_every_page_and_chart_needs_a_login(client, url):
    client.logout()
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.parametrize("url", ["/", "/tasks", "/latency", "/devices", "/charts/overview.json",
                                 "/charts/latency.json", "/tasks.csv", "/findings.csv"])
def test_another_projects_name_is_a_404(client, other_project, url):
    make_task(other_project, "secret")
    assert client.get(url, {"project": other_project.name}).status_code == 404


def test_another_projects_task_is_a_404_even_by_id(client, project, other_project):
    task = make_task(other_project, "secret", name="globex-only")
    make_step(task, "s1")
    for url in ["/tasks/secret", "/tasks/secret/waterfall.json", "/tasks/secret/steps/s1.json"]:
        assert client.get(url).status_code == 404
        assert client.get(url, {"project": other_project.name}).status_code == 404
    make_task(project, "mine")
    body = page(client, "/tasks")
    assert "mine" in body and "globex-only" not in body


def test_charts_only_count_the_current_projects_tasks(client, project, other_project):
    make_task(project, "a", duration_ms=100.0)
    for i in range(5):
        make_task(other_project, f"x{i}", duration_ms=9000.0)
    figs = charts_json(client, "/charts/overview.json")
    assert sum(sum(t["y"]) for t in figs["volume"]["data"]) == 1
    hist = charts_json(client, "/charts/latency.json", group_by="task")["task_histogram"]
    assert sum(hist["data"][0]["y"]) == 1


def test_superuser_switches_projects_in_the_top_bar(client, project, other_project):
    admin = get_user_model().objects.create_superuser("root", password="pw")
    client.force_login(admin)
    make_task(other_project, "g1", name="globex-task")
    body = page(client, "/tasks", project="globex")
    assert "globex-task" in body
    assert '<option value="globex" selected>' in body and '<option value="acme">' in body


# --- empty states ----------------------------------------------------------------------------


def test_a_new_project_explains_how_to_send_data(client, project):
    body = page(client, "/")
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://testserver/" in body
    assert "OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer &lt;your ingest key&gt;" in body
    assert "python manage.py create_key acme" in body
    assert "curl -X POST http://testserver/api/v1/ingest" in body
    for url in ("/tasks", "/latency", "/devices"):
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" in page(client, url)


@pytest.mark.django_db
def test_a_user_without_a_project_is_told_how_to_get_one(client):
    lonely = get_user_model().objects.create_user("lonely", password="pw")
    client.force_login(lonely)
    assert "create_project NAME" in page(client, "/")


# --- overview --------------------------------------------------------------------------------


def test_overview_shows_percentiles_per_release_and_links_the_tail(client, project, spread):
    body = page(client, "/")
    assert "p99" in body and 'id="chart-percentiles"' in body
    assert "min_duration_ms=" in body and "sort=-duration_ms" in body
    figs = charts_json(client, "/charts/overview.json")
    names = {t["name"] for t in figs["percentiles"]["data"]}
    assert {"v1 p99", "v2 p99", "v1 p50"} <= names
    v2 = next(t for t in figs["percentiles"]["data"] if t["name"] == "v2 p99")
    assert max(v for v in v2["y"] if v is not None) == pytest.approx(1000.0)
    errors = next(t for t in figs["errors"]["data"] if t["name"] == "v2")
    assert max(errors["y"]) == 100.0  # the one bucket with t9 failed entirely


def test_overview_filters_by_release_from_the_url(client, project, spread):
    figs = charts_json(client, "/charts/overview.json", release="v1")
    assert {t["name"] for t in figs["volume"]["data"]} == {"v1"}
    assert sum(sum(t["y"]) for t in figs["volume"]["data"]) == 5
    body = page(client, "/", release="v1")
    assert 'href="/tasks?release=v1"' in body  # nav keeps the global filters


def test_top_findings_rank_by_total_wasted_time_and_budget_is_averaged(client, project, spread):
    make_finding(spread[0], "slow_step", wasted_ms=100.0)
    make_finding(spread[1], "slow_step", wasted_ms=100.0)
    make_finding(spread[2], "repeated_tool_call", wasted_ms=900.0)
    analyse(spread[0], budget={"tool": 100.0, "prefill": 50.0})
    analyse(spread[1], budget={"tool": 300.0, "prefill": 50.0})
    figs = charts_json(client, "/charts/overview.json")
    bar = figs["findings"]["data"][0]
    assert bar["customdata"] == ["slow_step", "repeated_tool_call"]  # biggest last = top
    assert bar["x"] == [200.0, 900.0]  # ms
    tool = next(t for t in figs["budget"]["data"] if t["name"] == "tool")
    assert tool["x"] == [200.0]


POSSIBLE = "possible: no call ids or data flow show whether these calls were independent"


def test_a_low_confidence_finding_is_left_out_of_the_top_findings(client, project, spread):
    make_finding(spread[0], "serial_gap", wasted_ms=300.0)
    make_finding(spread[0], "parallelizable_calls", wasted_ms=900.0, confidence="low", confidence_reason=POSSIBLE)
    make_finding(spread[1], "serial_gap", wasted_ms=100.0, confidence="medium", confidence_reason="few runs")
    bar = charts_json(client, "/charts/overview.json")["findings"]["data"][0]
    assert bar["customdata"] == ["serial_gap"]
    assert bar["x"] == [400.0]
    assert "2 findings in 2 tasks" in bar["hovertext"][0]


def test_the_task_list_top_finding_and_wasted_time_leave_out_a_low_confidence_finding(client, project, monkeypatch):
    from analysis.engine import analyse, pipeline
    from analysis.engine.detectors.base import Finding as Detected

    task = make_task(project, "run-1", duration_ms=2000.0)
    make_step(task, "plan", kind="llm", duration_ms=500.0)
    make_step(task, "a", offset_ms=700.0, duration_ms=600.0)
    make_step(task, "b", offset_ms=1300.0, duration_ms=700.0)

    def detect(ctx):  # what the detectors would say: a sure gap, and a guess that wastes more
        yield Detected("serial_gap", ("a",), 200.0, "200 ms idle before a", {},
                       intervals=((ctx.start_ms + 500, ctx.start_ms + 700),))
        yield Detected("parallelizable_calls", ("a", "b"), 600.0, "a and b ran one after the other", {},
                       intervals=((ctx.start_ms + 1300, ctx.start_ms + 1900),), confidence="low",
                       confidence_reason=POSSIBLE)

    monkeypatch.setattr(analyse, "all_detectors", lambda: {"test": detect})
    pipeline.run(task.pk, force=True)
    row = page(client, "/tasks").split('<div class="muted small">run-1</div>')[1].split("</tr>")[0]
    assert '<span class="finding-kind">serial_gap</span> <span class="muted">200 ms</span>' in row
    assert "parallelizable_calls" not in row


def test_bad_filter_is_a_400_that_names_the_parameter(client, project, spread):
    response = client.get("/", {"range": "3 weeks"})
    assert response.status_code == 400 and b"range: must be one of" in response.content
    response = client.get("/charts/overview.json", {"min_duration_ms": "fast"})
    assert response.status_code == 400 and "min_duration_ms" in response.json()["error"]
    response = client.get("/tasks", {"sort": "name"})
    assert response.status_code == 400 and b"sort: must be one of" in response.content
    response = client.get("/tasks", {"cursor": "garbage!"})
    assert response.status_code == 400 and b"cursor" in response.content


# --- tasks -----------------------------------------------------------------------------------


def task_ids(body: str) -> list[str]:
    import re

    return re.findall(r'<div class="muted small">(t\d+)</div>', body)


def test_task_list_filters_by_duration_status_and_finding(client, project, spread):
    assert task_ids(page(client, "/tasks", min_duration_ms=300, max_duration_ms=600)) == ["t4", "t3", "t2"]
    assert task_ids(page(client, "/tasks", status="error")) == ["t9"]
    analyse(spread[3], kinds=["slow_step"])
    assert task_ids(page(client, "/tasks", finding="slow_step")) == ["t3"]
    assert task_ids(page(client, "/tasks", q="t7")) == ["t7"]


def test_task_list_filters_by_device(client, project, spread):
    make_step(spread[4], "s1", kind="llm", device="groq-lpu-03")
    Device.objects.create(project=project, name="groq-lpu-03", vendor="groq", first_seen=T0, last_seen=T0)
    body = page(client, "/tasks", device="groq-lpu-03")
    assert task_ids(body) == ["t4"]


def test_task_list_sorts_and_pages_with_a_cursor_that_keeps_the_filters(client, project, spread, monkeypatch):
    from analysis.dashboard import views

    monkeypatch.setattr(views, "PAGE_SIZE", 3)
    body = page(client, "/tasks", sort="-duration_ms", release="v2")
    assert task_ids(body) == ["t9", "t8", "t7"]
    next_href = html.unescape(re.search(r'href="\?([^"]+)" rel="next"', body).group(1))
    assert "release=v2" in next_href and "sort=-duration_ms" in next_href
    second = page(client, "/tasks?" + next_href)
    assert task_ids(second) == ["t6", "t5"]
    assert 'rel="next"' not in second
    ascending = page(client, "/tasks", sort="duration_ms")
    assert task_ids(ascending) == ["t0", "t1", "t2"]


def test_task_list_escapes_hostile_names(client, project):
    make_task(project, "x1", name=XSS_NAME, release='"><svg onload=alert(1)>')
    body = page(client, "/tasks")
    assert XSS_NAME not in body and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in body
    assert "<svg onload" not in body


# --- task detail -----------------------------------------------------------------------------


@pytest.fixture
def traced(project):
    task = make_task(project, "run-1", duration_ms=2000.0, name=XSS_NAME)
    make_step(task, "root", kind="agent", duration_ms=2000.0)
    make_step(task, "plan", parent="root", kind="llm", duration_ms=800.0, model="llama-3-70b",
              device="groq-lpu-03", ttft_ms=120.0, input_tokens=900, output_tokens=80)
    make_step(task, "search", parent="root", kind="tool", offset_ms=800.0, duration_ms=900.0,
              tool_name="search", tool_args={"q": XSS_ARG}, attributes={"prompt": XSS_NAME})
    make_step(task, "answer", parent="root", kind="llm", offset_ms=1700.0, duration_ms=300.0)
    make_finding(task, "slow_step", wasted_ms=600.0, step_ids=["search"],
                 summary=f"search took 900 ms {XSS_ARG}")
    analyse(task, critical_path=["root", "plan", "search", "answer"],
            budget={"prefill": 120.0, "decode": 980.0, "tool": 900.0},
            whatif={"actual_ms": 2000.0, "parallel_ms": 2000.0, "cached_ms": 1400.0, "parallel_cached_ms": 1400.0,
                    "llm_path_ms": 1100.0, "speculative_ms": 1900.0,
                    "hardware": {"groq": {"ms": 1200.0, "llm_ms": 300.0, "with_fixes_ms": 600.0}}},
            kinds=["slow_step"], wasted_ms=600.0)
    ResourceSample.objects.create(project=project, device="groq-lpu-03", ts=task.started_at, queue_depth=4,
                                  utilization=0.8, temperature_c=60, throttled=0)
    ResourceSample.objects.create(project=project, device="groq-lpu-03", ts=task.started_at + timedelta(seconds=1),
                                  queue_depth=12, utilization=0.99, temperature_c=61, throttled=1)
    ResourceSample.objects.create(project=project, device="groq-lpu-03", ts=task.started_at + timedelta(hours=1),
                                  queue_depth=0)
    return task


def test_task_detail_shows_findings_budget_and_whatif_escaped(client, traced):
    body = page(client, "/tasks/run-1")
    # A 4-step waterfall draws no WebGL: the page loads Plotly's basic bundle, not the full one.
    assert "js/plotly-basic.min.js" in body and "js/plotly.min.js" not in body
    assert XSS_NAME not in body and "&lt;script&gt;" in body
    assert XSS_ARG not in body and "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in body
    assert "slow_step" in body and 'data-step="search"' in body
    whatif = body.split('id="whatif-table"')[1].split("</table>")[0]
    rows = [[c for c in re.split(r"<[^>]+>", r) if c.strip()] for r in whatif.split("<tr>")[2:]]
    assert rows == [["critical path as it ran", "2 s"],
                    ["independent calls run in parallel", "2 s", "0 ms"],
                    ["repeated tool calls cached", "1.4 s", "600 ms"],
                    ["both: parallel and cached", "1.4 s", "600 ms"],
                    ["speculative", "1.9 s", "100 ms"],
                    ["LLM calls on groq", "1.2 s", "800 ms"],
                    ["on groq, with both fixes", "600 ms", "1.4 s"]]
    config = json.loads(body.split('id="page-config" type="application/json">')[1].split("</script>")[0])
    assert config["waterfall"] == "/tasks/run-1/waterfall.json?"


def test_whatif_says_which_calls_already_ran_on_a_family_and_which_are_hypothetical(project):
    from analysis.dashboard.selectors import whatif_rows

    rows = whatif_rows({"actual_ms": 9000.0, "llm_path_ms": 8000.0, "unknown_hardware_ms": 3000.0,
                        "hardware": {"groq": {"ms": 7000.0, "llm_ms": 6000.0, "already_ms": 2000.0,
                                              "with_fixes_ms": 7000.0}}})
    labels = [label for label, _, _ in rows]
    assert ("LLM calls on groq (2 s of it already ran there; hypothetical for 3 s of it, on hardware no device "
            "named (a hosted API))") in labels
    assert not any("unknown" in label for label in labels)  # a fact about the path, not a scenario


def test_waterfall_json_draws_each_step_with_critical_path_findings_and_device_lane(client, traced):
    figs = charts_json(client, "/tasks/run-1/waterfall.json")
    data = figs["waterfall"]["data"]
    bars = [t for t in data if t["type"] == "bar"]
    assert sorted(sum((t["customdata"] for t in bars), [])) == ["answer", "plan", "root", "search"]
    assert next(t for t in data if t["name"] == "critical path")["customdata"] == ["root", "plan", "search", "answer"]
    assert next(t for t in data if t["name"] == "findings")["customdata"] == ["search"]
    queue = next(t for t in data if t.get("yaxis") == "y2")
    assert queue["y"] == [4, 12]  # the sample an hour later is outside the task
    assert queue["x"] == [0.0, 1000.0]
    text = json.dumps(figs)
    assert "<img" not in text and "<script" not in text and "&lt;img" in text
    assert figs["parents"] == ["root"]
    assert next(t for t in figs["budget"]["data"] if t["name"] == "tool")["x"] == [900.0]


def finding_rows(body: str) -> dict[str, str]:
    """The task page's findings table: kind → its row's HTML."""
    table = body.split('id="findings-table"')[1].split("</table>")[0]
    return {re.search(r'class="finding-kind">([^<]+)<', row).group(1): row for row in table.split("<tr")[2:]}


def test_a_low_confidence_finding_is_dimmed_with_why_and_a_medium_one_is_marked(client, traced):
    make_finding(traced, "parallelizable_calls", wasted_ms=900.0, step_ids=["plan"], summary="one after the other",
                 confidence="low", confidence_reason=f"{POSSIBLE} {XSS_ARG}")
    make_finding(traced, "serial_gap", wasted_ms=300.0, step_ids=["answer"], summary="idle",
                 confidence="medium", confidence_reason="an outlier among 4 hand-offs only")
    body = page(client, "/tasks/run-1")
    rows = finding_rows(body)
    assert list(rows) == ["slow_step", "serial_gap", "parallelizable_calls"]  # the guess last, though it wastes most
    low = rows["parallelizable_calls"]
    assert "finding-possible" in low and '<span class="confidence-tag">possible</span>' in low
    assert f'<div class="confidence-reason">{POSSIBLE} &quot;&gt;&lt;img src=x onerror=alert(1)&gt;</div>' in low
    assert XSS_ARG not in body
    assert "medium confidence</span>" in rows["serial_gap"] and "finding-possible" not in rows["serial_gap"]
    assert "finding-possible" not in rows["slow_step"] and "confidence-tag" not in rows["slow_step"]
    assert "Dimmed findings are only possible" in body
    data = charts_json(client, "/tasks/run-1/waterfall.json")["waterfall"]["data"]
    assert next(t for t in data if t["name"] == "findings")["customdata"] == ["search", "answer"]
    faint = next(t for t in data if t["name"] == "possible findings")
    assert faint["customdata"] == ["plan"] and faint["opacity"] < 1
    assert "<img" not in json.dumps(data)


def test_step_json_returns_raw_attributes(client, traced):
    step = charts_json(client, "/tasks/run-1/steps/search.json")
    assert step["tool_args"] == {"q": XSS_ARG} and step["attributes"] == {"prompt": XSS_NAME}
    assert client.get("/tasks/run-1/steps/nope.json").status_code == 404


def test_step_json_names_the_pages_its_tool_model_device_and_agent_lead_to(client, traced):
    tool = charts_json(client, "/tasks/run-1/steps/search.json", project="acme")
    assert tool["task_id"] == "run-1" and tool["agent"] == XSS_NAME and tool["offset_ms"] == 800.0
    assert tool["links"]["tool"] == "/tasks?project=acme&tool=search"
    assert tool["links"]["agent"] == reverse("agent-detail", args=[XSS_NAME]) + "?project=acme"
    assert tool["links"]["model"] == tool["links"]["device"] == tool["links"]["server"] == ""
    llm = charts_json(client, "/tasks/run-1/steps/plan.json", project="acme")
    assert llm["links"]["model"] == "/tasks?project=acme&model=llama-3-70b"
    device = urlparse(llm["links"]["device"])
    assert device.path == "/devices" and parse_qs(device.query)["device"] == ["groq-lpu-03"]
    assert "mark_from" in parse_qs(device.query)  # the step's window, shaded


def test_waterfall_collapse_and_reveal(client, traced):
    top = charts_json(client, "/tasks/run-1/waterfall.json", mode="top")["waterfall"]["layout"]["meta"]
    assert top["visible"] == 4  # root is level 0: its children stay visible
    closed = charts_json(client, "/tasks/run-1/waterfall.json", mode="all", toggle="root")["waterfall"]
    assert closed["layout"]["meta"]["visible"] == 1 and closed["layout"]["meta"]["collapsed"] == ["root"]
    assert client.get("/tasks/run-1/waterfall.json", {"mode": "sideways"}).status_code == 400


# --- latency ---------------------------------------------------------------------------------


def test_latency_percentiles_and_histogram_bucket_drill_down_agree(client, project, spread):
    body = page(client, "/latency", group_by="task")
    assert "1 s" in body  # max
    figs = charts_json(client, "/charts/latency.json", group_by="task")
    bar = figs["task_histogram"]["data"][0]
    assert sum(bar["y"]) == 10
    for (low, high), count in zip(bar["customdata"], bar["y"], strict=True):
        listed = task_ids(page(client, "/tasks", min_duration_ms=low, max_duration_ms=high))
        assert len(listed) == count
    assert figs["task_ecdf"]["layout"]["xaxis"]["type"] == "log"


def test_latency_percentile_links_keep_the_other_filters(client, project, spread):
    body = page(client, "/latency", group_by="task", release="v2")
    assert "release=v2&amp;min_duration_ms=" in body and "sort=-duration_ms" in body


def test_latency_by_step_group(client, project, spread):
    for t in spread:
        make_step(t, "a", kind="llm", model="llama", duration_ms=50.0)
        make_step(t, "b", kind="tool", tool_name="search", duration_ms=t.duration_ms / 2)
    body = page(client, "/latency", group_by="tool")
    assert ">search</a>" in body
    figs = charts_json(client, "/charts/latency.json", group_by="model", group="llama")
    assert sum(figs["group_histogram"]["data"][0]["y"]) == 10
    assert [t["name"] for t in figs["group_ecdf"]["data"]] == ["llama"]
    assert client.get("/charts/latency.json", {"group_by": "colour"}).status_code == 400


# --- exports ---------------------------------------------------------------------------------


def read_csv(response) -> list[list[str]]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_tasks_csv_uses_the_list_filters_and_defuses_formulas(client, project, spread):
    make_task(project, "evil", name="=HYPERLINK(\"http://x\")", release="+1", duration_ms=5000.0)
    rows = read_csv(client.get("/tasks.csv", {"min_duration_ms": 900}))
    assert rows[0][:3] == ["task_id", "name", "release"]
    by_id = {r[0]: r for r in rows[1:]}
    assert set(by_id) == {"t8", "t9", "evil"}
    assert by_id["evil"][1] == "'=HYPERLINK(\"http://x\")" and by_id["evil"][2] == "'+1"


def test_findings_csv_lists_the_projects_findings(client, project, other_project, spread):
    make_finding(spread[0], "slow_step", wasted_ms=10.0, summary="@SUM(A1)")
    make_finding(make_task(other_project, "o"), "slow_step", wasted_ms=99.0, summary="theirs")
    rows = read_csv(client.get("/findings.csv"))
    assert len(rows) == 2 and rows[1][0] == "t0" and rows[1][-1] == "'@SUM(A1)"
    make_finding(spread[1], "parallelizable_calls", wasted_ms=50.0, confidence="low", confidence_reason=POSSIBLE)
    rows = [dict(zip(rows[0], r, strict=True)) for r in read_csv(client.get("/findings.csv"))[1:]]
    assert [(r["kind"], r["confidence"], r["confidence_reason"]) for r in rows] == [
        ("parallelizable_calls", "low", POSSIBLE), ("slow_step", "high", "")]
    assert read_csv(client.get("/findings.csv", {"finding": "serial_gap"}))[1:] == []


def test_global_filters_keep_the_page_filters_and_restart_paging(client, project, spread, monkeypatch):
    from analysis.dashboard import views

    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    first = page(client, "/tasks", status="ok", release="v1")
    next_href = html.unescape(re.search(r'href="\?([^"]+)" rel="next"', first).group(1))
    body = page(client, "/tasks?" + next_href + "&range=30d")
    form = body.split('id="global-filters"')[1].split("</form>")[0]
    assert '<input type="hidden" name="status" value="ok">' in form
    assert '<option value="30d" selected>' in form and '<option value="v1" selected>' in form
    assert "cursor" not in form


def test_a_custom_time_range_from_the_top_bar(client, project, spread):
    # datetime-local inputs send minutes without a zone: read as UTC
    body = page(client, "/tasks", since="2026-11-01T10:03", until="2026-11-01T10:06")
    assert task_ids(body) == ["t5", "t4", "t3"]
    assert 'name="since" value="2026-11-01T10:03"' in body


def test_releases_past_the_busiest_six_fold_into_other(client, project):
    for r in range(8):
        for i in range(8 - r):
            make_task(project, f"r{r}-{i}", release=f"v{r}", duration_ms=100.0 + i, start=T0 + timedelta(seconds=i))
    figs = charts_json(client, "/charts/overview.json")
    volume = {t["name"]: sum(t["y"]) for t in figs["volume"]["data"]}
    assert volume == {"v0": 8, "v1": 7, "v2": 6, "v3": 5, "v4": 4, "v5": 3, "(other)": 2 + 1}
    # percentiles of different releases are not merged: "(other)" has no percentile line
    assert "(other) p99" not in {t["name"] for t in figs["percentiles"]["data"]}
    assert "v5 p99" in {t["name"] for t in figs["percentiles"]["data"]}


def test_findings_follow_every_task_filter(client, project, spread):
    make_finding(spread[0], "slow_step", wasted_ms=100.0)  # v1, prod, 100 ms
    staging = make_task(project, "stg", release="v1", environment="staging", duration_ms=5000.0)
    make_finding(staging, "slow_step", wasted_ms=300.0)
    make_finding(spread[7], "serial_gap", wasted_ms=50.0)  # v2
    def wasted(**params):
        bar = charts_json(client, "/charts/overview.json", **params)["findings"]["data"]
        return dict(zip(bar[0]["customdata"], bar[0]["x"], strict=True)) if bar else {}
    assert wasted() == {"slow_step": 400.0, "serial_gap": 50.0}
    assert wasted(release="v1") == {"slow_step": 400.0}
    assert wasted(environment="staging") == {"slow_step": 300.0}
    assert wasted(min_duration_ms=1000) == {"slow_step": 300.0}
    assert wasted(until="2026-11-01T10:05:00Z") == {"slow_step": 400.0}


def test_waterfall_order_is_the_apis_tree_order(project):
    """The waterfall reads steps presorted by SQL; the API sorts them in Python: same order,
    including ties on start time, children before later siblings, and a parent cycle."""
    from analysis.dashboard import selectors

    task = make_task(project, "tree", duration_ms=1000.0)
    specs = [("b", "", 0, 500), ("a", "", 0, 500), ("c", "", 0, 300), ("b2", "b", 10, 50), ("b1", "b", 10, 50),
             ("B0", "b", 5, 100), ("deep", "b1", 20, 5), ("orphan", "missing", 1, 2), ("x", "y", 3, 4),
             ("y", "x", 3, 4), ("é", "a", 1, 1), ("z", "a", 1, 1)]
    for step_id, parent, offset, duration in reversed(specs):
        make_step(task, step_id, parent=parent, offset_ms=offset, duration_ms=duration)
    api = [(s["step_id"], s["depth"]) for s in map(json.loads, selectors.task_steps_json(task=task))]
    assert [(r.step_id, r.depth) for r in selectors.task_waterfall_rows(task=task)] == api
    assert api[:3] == [("c", 0), ("a", 0), ("z", 1)]
