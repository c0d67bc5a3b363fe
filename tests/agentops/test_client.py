"""agentops.client against a live server: DataFrames from the Parquet export and the read API,
the dashboard's figures as plotly Figures, and an exception for every refusal."""

from __future__ import annotations

import http.server
import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest

from agentops.client import (
    AuthenticationError,
    BadRequest,
    Client,
    NotFound,
    PermissionDenied,
    RateLimited,
    Unavailable,
)
from analysis import rollups
from analysis.dashboard import aggregates
from analysis.filters import TaskFilters
from analysis.models import ModelPrice
from ingest.models import ResourceSample, Step, Task
from tests.analysis.factories import T0
from tests.analysis.test_export import _populate
from tests.conftest import faults_pass

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data(project, other_project):
    from datetime import timedelta
    from decimal import Decimal

    _populate(project)
    _populate(other_project, prefix="other-")
    ModelPrice.objects.create(model="llama-70b", input_per_million=Decimal("0.6"),
                              output_per_million=Decimal("0.8"), effective_from=T0 - timedelta(days=30))
    return project


@pytest.fixture
def client(live_server, data, read_key) -> Client:
    return Client(live_server.url, read_key)


def test_bulk_reads_are_dataframes_of_the_projects_rows(client, data):
    steps = client.steps()
    assert len(steps) == Step.objects.filter(project=data).count()
    assert str(steps["started_at"].dtype) == "datetime64[us, UTC]"
    tools = client.steps(release="v2", kind="tool")
    assert len(tools) == 3 and set(tools["kind"]) == {"tool"} and set(tools["release"]) == {"v2"}
    tasks = client.tasks()
    assert len(tasks) == Task.objects.filter(project=data).count() == 6
    assert tasks.set_index("task_id").loc["t0", "cost_usd"] == pytest.approx((1000 * 0.6 + 50 * 0.8) / 1e6)
    assert pd.isna(tasks.set_index("task_id").loc["t1", "cost_usd"])  # mixtral: no price
    assert len(client.findings(finding="slow_step")) == 1
    assert len(client.samples(device="gpu-0")) == ResourceSample.objects.filter(project=data, device="gpu-0").count()


@pytest.mark.parametrize("group_by", ["kind", "tool", "model"])
def test_latency_is_what_the_dashboard_computes(client, data, group_by):
    frame = client.latency(group_by=group_by, release="v2")
    expected = aggregates.duration_percentiles(project=data, filters=TaskFilters(release="v2"), group_by=group_by)
    assert list(frame.columns) == ["group", "count", "p50", "p90", "p95", "p99", "max"]
    got = frame.set_index("group")
    assert len(got) == len(expected) > 0
    for row in expected:
        assert got.loc[row["group"], "count"] == row["count"]
        assert got.loc[row["group"], "p95"] == pytest.approx(row["p95"])
    # and what pandas computes from the exported steps (percentile_cont = linear interpolation), within
    # the bound of the histogram the dashboard reads its percentiles from
    if group_by == "tool":
        steps = client.steps(release="v2", kind="tool")
        assert got.loc["search_orders", "p95"] == pytest.approx(steps.duration_ms.quantile(0.95),
                                                                rel=rollups.RELATIVE_ERROR * 1.001)


def test_compare_returns_each_table_of_the_release_comparison(client):
    tasks = client.compare("v1", "v2")
    assert "(all tasks)" in set(tasks["name"]) and {"p95_a_ms", "p95_b_ms", "p95_delta_ms"} <= set(tasks.columns)
    assert tasks.attrs["report"]["a"] == "v1"
    cost = client.compare("v1", "v2", table="cost")
    assert list(cost["release"]) == ["v1", "v2"] and "per_task_usd" in cost.columns
    steps = client.compare("v1", "v2", table="steps")
    assert "key" in steps.columns and len(steps) > 0
    with pytest.raises(ValueError, match="table: must be one of"):
        client.compare("v1", "v2", table="nope")


def test_list_endpoints_are_read_page_after_page(client):
    frame = client.records("/api/v1/tasks", limit=2)
    assert len(frame) == 6 and frame["task_id"].is_unique
    assert str(frame["started_at"].dtype).startswith("datetime64")


def test_figures_are_the_dashboards_own_as_plotly_figures(client):
    latency = client.figure("latency")
    assert isinstance(latency, go.Figure) and latency.data
    ecdf = client.figure("latency", "group_ecdf", group_by="kind")
    assert isinstance(ecdf, go.Figure)
    waterfall = client.figure("waterfall", task_id="t0")
    assert isinstance(waterfall, go.Figure) and len(waterfall.data) > 0
    overview = client.figures("overview", release="v1")
    assert {"percentiles", "volume", "budget"} <= set(overview)
    with pytest.raises(ValueError, match="chart: latency has"):
        client.figure("latency", "pie")
    with pytest.raises(NotFound):
        client.figure("waterfall", task_id="no-such-task")


def test_refusals_are_clear_exceptions(live_server, data, read_key, ingest_key, other_keys):
    with pytest.raises(AuthenticationError) as exc:
        Client(live_server.url, "ao_wrong_key").steps()
    assert exc.value.status == 401 and "unknown or revoked key" in str(exc.value)
    with pytest.raises(PermissionDenied, match="no 'read' scope"):
        Client(live_server.url, ingest_key).tasks()
    with pytest.raises(PermissionDenied):
        Client(live_server.url, ingest_key).figure("latency")
    with pytest.raises(BadRequest, match="kind: must be one of"):
        Client(live_server.url, read_key).steps(kind="banana")
    with pytest.raises(NotFound):
        Client(live_server.url, other_keys["read"]).steps(project="acme")
    with pytest.raises(NotFound):
        Client(live_server.url, read_key).get_json("/api/v1/tasks/no-such-task")


def test_429_raises_rate_limited_with_retry_after(live_server, data, read_key, settings):
    settings.AGENTOPS_KEY_RATE_LIMIT = "1/minute"
    client = Client(live_server.url, read_key)
    client.latency()
    with pytest.raises(RateLimited) as exc:
        client.latency()
    assert exc.value.status == 429 and exc.value.retry_after and exc.value.retry_after > 0


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Answers 429 (Retry-After: 0), then 503 (Retry-After: 0), then the latency JSON."""

    answers: list[tuple[int, dict, dict]] = []

    def do_GET(self):  # noqa: N802
        status, headers, body = self.answers.pop(0) if self.answers else (200, {}, {"group_by": "task", "results": []})
        self.send_response(status)
        for k, v in {"Content-Type": "application/json", **headers}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_retries_wait_out_429_and_503_when_asked(flaky):
    _Flaky.answers = [(429, {"Retry-After": "0"}, {"error": "slow down"}),
                      (503, {"Retry-After": "0"}, {"error": "database unavailable, retry later"})]
    assert Client(flaky, "k", retries=2).latency().empty
    _Flaky.answers = [(503, {"Retry-After": "7"}, {"error": "database unavailable, retry later"})]
    with pytest.raises(Unavailable) as exc:
        Client(flaky, "k").latency()
    assert exc.value.retry_after == 7 and "database unavailable" in str(exc.value)


def test_the_client_module_needs_no_django():
    """Loaded from its file with Django made unimportable: a notebook without the server's
    packages can use it."""
    code = f"""
import importlib.util, sys
sys.modules["django"] = None
spec = importlib.util.spec_from_file_location("client", {str(ROOT / "agentops" / "client.py")!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(module.Client("http://127.0.0.1:9", "k"))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    source = (ROOT / "agentops" / "client.py").read_text()
    assert "import django" not in source and "from django" not in source
    assert importlib.util.find_spec("agentops.client") is not None


@faults_pass
@pytest.mark.slow
def test_the_client_reads_a_running_stack(stack_env, tmp_path, project, read_key):
    """runstack (gunicorn gthread web, Celery worker and beat) on a free port, as `make demo` runs."""
    from tests.agentops.test_runstack import Stack

    _populate(project)
    stack_env["AGENTOPS_DATA_DIR"] = str(tmp_path)
    with Stack(stack_env, tmp_path / "runstack.log", "--web-workers", "1", "--worker-concurrency", "1",
               "--no-beat") as stack:
        client = Client(stack.url, read_key)
        try:
            steps = client.steps(kind="llm")
        except Exception:
            print(stack.output()[-6000:])
            raise
        assert len(steps) == 6 and set(steps["kind"]) == {"llm"}
        assert len(client.tasks(release="v1")) == 3
        assert isinstance(client.figure("latency", "task_ecdf"), go.Figure)
        assert client.latency(group_by="model").set_index("group").loc["mixtral", "count"] == 3
    assert stack.code == 0, stack.output()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Redirects /away to `target`; records the Authorization header of every request."""

    seen: list[tuple[str, str | None]] = []
    target = ""

    def do_GET(self):  # noqa: N802
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        if self.path.startswith("/api/v1/latency") and type(self).target:
            self.send_response(302)
            self.send_header("Location", type(self).target)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"group_by": "task", "results": []}).encode())

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("same_host", [True, False])
def test_the_key_is_not_sent_on_to_another_host_on_redirect(same_host):
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    first, second = (s.server_address[1] for s in servers)
    _Recorder.seen = []
    # "localhost" is another host name than "127.0.0.1", as another origin would be.
    _Recorder.target = (f"http://127.0.0.1:{first}/moved" if same_host else f"http://localhost:{second}/moved")
    try:
        assert Client(f"http://127.0.0.1:{first}", "secret-key").latency().empty
    finally:
        for server in servers:
            server.shutdown()
    [(_, first_auth), (path, redirected_auth)] = _Recorder.seen
    assert first_auth == "Bearer secret-key" and path == "/moved"
    assert redirected_auth == ("Bearer secret-key" if same_host else None)
