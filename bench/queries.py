"""Dashboard queries on a bulk-loaded dataset: median and p95 of repeated runs of each.

Every query goes through the same selector or view the product uses; a query whose code is not
there yet is reported as skipped rather than timed on a stand-in."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timed(fn: Callable[[], object], *, runs: int = 7) -> dict:
    """Median and p95 wall time; `cpu_ms`, the median CPU time of this process (the Python side
    of a request, without Postgres's), tells a slow query from a busy machine."""
    fn()  # warm the cache and the connection: dashboards are read repeatedly
    samples, cpu = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    samples.sort()
    return {"median_ms": round(statistics.median(samples), 1),
            "p95_ms": round(samples[min(len(samples) - 1, int(0.95 * len(samples)))], 1),
            "cpu_ms": round(statistics.median(cpu), 1)}


def query_suite(project) -> dict[str, Callable[[], object]]:
    """The queries to time, by name, built against the product's own selectors."""
    from django.test import Client

    from analysis.dashboard import selectors
    from analysis.filters import TaskFilters

    suite: dict[str, Callable[[], object]] = {
        "task list (first page)": lambda: selectors.task_list(project=project, filters=TaskFilters(), limit=50),
        "task list (filtered: release+name)": lambda: selectors.task_list(
            project=project, filters=TaskFilters(release="v2", name="checkout-agent"), limit=50),
        "task list (sorted by duration)": lambda: selectors.task_list(
            project=project, filters=TaskFilters(), limit=50, sort="-duration_ms"),
    }

    def task_detail():
        from ingest.models import IngestKey
        from ingest.services import key_create

        key = getattr(task_detail, "key", None)
        if key is None:
            key = task_detail.key = key_create(project=project, scopes=[IngestKey.SCOPE_READ])[1]
        response = Client().get("/api/v1/tasks/big-task", HTTP_AUTHORIZATION=f"Bearer {key}")
        assert response.status_code == 200, response.status_code
        return response.content

    suite["task detail API (50,000 steps)"] = task_detail
    for name, factory in _optional_queries(project).items():
        suite[name] = factory
    return suite


def _optional_queries(project) -> dict[str, Callable[[], object]]:
    """Queries from the analysis, releases and alerts code, when present."""
    out: dict[str, Callable[[], object]] = {}
    try:
        from analysis.dashboard.aggregates import duration_percentiles as latency_percentiles
    except ImportError:
        latency_percentiles = None
    if latency_percentiles is not None:
        from analysis.filters import TaskFilters

        for group in ("task", "kind", "model"):
            out[f"latency percentiles by {group}"] = (
                lambda g=group: latency_percentiles(project=project, group_by=g, filters=TaskFilters(), limit=100))
    try:
        from analysis.releases.compare import release_compare
    except ImportError:
        release_compare = None
    if release_compare is not None:
        from django.core.cache import cache

        def cold():
            cache.clear()  # every run computes the whole comparison, as the first visit does
            return release_compare(project=project, a="v1", b="v2")

        out["release compare v1 vs v2 (computed)"] = cold
        out["release compare v1 vs v2 (again: cached)"] = lambda: release_compare(project=project, a="v1", b="v2")
    out.update(_dashboard_queries(project))
    out.update(_alert_queries(project))
    out.update(device_queries(project))
    out.update(_pages(project))
    out.update(_comparison_queries(project))
    return out


def _last_day(project) -> str:
    """The start of the data's last 24 hours, as a `since` parameter."""
    from datetime import timedelta

    from django.db.models import Max

    from ingest.models import Task

    newest = Task.objects.filter(project=project).aggregate(last=Max("started_at"))["last"]
    return (newest - timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dashboard_queries(project) -> dict[str, Callable[[], object]]:
    """The selectors behind the Overview and Latency pages (whole 30 days, no filter: the
    default view and the worst case)."""
    from analysis.dashboard import aggregates
    from analysis.filters import TaskFilters

    f = TaskFilters()
    wanted = {
        "overview totals": ("overview_totals", {}),
        "overview series (volume, p50/p95/p99 per bucket)": ("overview_series", {}),
        "top findings": ("top_findings", {}),
        "latency budget by release": ("budget_by_release", {}),
        "latency histogram (tasks)": ("duration_histogram", {}),
        "latency histogram (llm steps)": ("duration_histogram", {"group_by": "kind", "group": "llm"}),
        "latency ECDF by model": ("duration_quantiles", {"group_by": "model",
                                                         "groups": ["llama-3.1-70b", "llama-3.1-8b"]}),
        "overview: slowest agents": ("slowest_agents", {}),
        "overview: critical-path time (newest 2,000 analysed tasks)": ("critical_path_time", {}),
    }
    out = {}
    for label, (name, kwargs) in wanted.items():
        fn = getattr(aggregates, name, None)
        if fn is not None:
            out[label] = lambda fn=fn, kwargs=kwargs: fn(project=project, filters=f, **kwargs)
    if hasattr(aggregates, "regressions"):
        from datetime import datetime

        day = TaskFilters(since=datetime.fromisoformat(_last_day(project).replace("Z", "+00:00")))
        out["overview: regressions, last 24 h vs the 24 h before"] = (
            lambda: aggregates.regressions(project=project, filters=day))
        out["overview: slowest agents, last 24 h vs the 24 h before"] = (
            lambda: aggregates.slowest_agents(project=project, filters=day))
    return out


def _alert_queries(project) -> dict[str, Callable[[], object]]:
    """A full evaluation of one alert rule (measure, baseline, state, history), as beat runs it
    every minute: a task percentile, and the worst case — a step percentile against a release
    baseline (bench/alerts_eval.py times every metric)."""
    from datetime import timedelta

    from django.db.models import Max

    from analysis.alerts.evaluation import rules_evaluate
    from analysis.alerts.models import AlertRule
    from ingest.models import Task

    # Evaluated as of a minute after the newest task, so the rule's window holds traffic (a
    # dataset loaded a while ago has none in "the last 10 minutes" of the wall clock, and a rule
    # with too few samples returns before measuring its baseline).
    now = Task.objects.filter(project=project).aggregate(last=Max("started_at"))["last"] + timedelta(minutes=1)

    rules = {
        "alert evaluation: task p95 (10 min)": dict(metric="task_duration_p95", threshold=5000, filters={},
                                                   baseline="none", baseline_release=""),
        "alert evaluation: chat p99 vs release v2": dict(
            metric="step_duration_p99", threshold=20, filters={"release": "v3", "step_name": "chat"},
            baseline="release", baseline_release="v2"),
    }
    out = {}
    for label, fields in rules.items():
        rule = AlertRule.objects.create(project=project, name=label[:100], window_minutes=10, min_samples=20,
                                        for_minutes=10, **fields)

        def evaluate(rule=rule):
            AlertRule.objects.filter(pk=rule.pk).update(last_evaluated_at=None)  # not a duplicate tick
            return rules_evaluate(now=now, rule_ids=[rule.pk], deliver=False)
        out[label] = evaluate
    return out


def _pages(project) -> dict[str, Callable[[], object]]:
    """Whole requests, server side (Django test client, no network): what a person waits for."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(username="bench", defaults={"is_superuser": True})
    client = Client()
    client.force_login(user)

    def page(path: str):
        from urllib.parse import parse_qsl, urlsplit

        url = urlsplit(path)  # the client ignores the path's own query when given data: merge them
        params = {**dict(parse_qsl(url.query)), "project": project.name}

        def get():
            response = client.get(url.path, params)
            assert response.status_code == 200, (path, response.status_code)
            return response.content
        return get

    from analysis.engine import learned

    def learn():
        # What the workers do once a minute per agent that ran: its last 200 runs' calls.
        return learned.refresh(project.pk, "checkout-agent", "v2")

    learn()  # the Agent page below reads what this learned
    return {"learn dependencies: one agent's refresh (200 runs)": learn,
            "page: agent call graph (/agents/checkout-agent)": page("/agents/checkout-agent"),
            "page: overview (tiles and culprits, all time)": page("/"),
            "page: overview, last 24 h (culprits against the 24 h before)": page(f"/?since={_last_day(project)}"),
            "page: overview charts JSON": page("/charts/overview.json"),
            "page: latency charts JSON": page("/charts/latency.json"),
            "page: devices (18 devices on 6 hosts, grouped verdicts, server vs client)": page("/devices"),
            "page: devices charts JSON (small multiples, breakdown, ECDFs)": page("/charts/devices.json"),
            "page: devices telemetry JSON, as the page fetches it": page("/charts/devices.json?parts=telemetry"),
            "page: devices at one incident (device + 30 min)": page(_incident_path(project)),
            "page: releases list": page("/releases"),
            "page: task detail waterfall JSON (50,000 steps)": page("/tasks/big-task/waterfall.json")}


def _incident_path(project) -> str:
    """The Devices page as a verdict group's "chart" link opens it: one server, 30 minutes."""
    from analysis.dashboard import devices
    from analysis.filters import TaskFilters

    groups, _ = devices.verdict_groups(project=project, filters=TaskFilters(), limit=1)
    if not groups:
        return "/devices"
    return devices.moment_url({}, device=groups[0].device, start=groups[0].start, end=groups[0].end).split("#")[0]


def device_queries(project) -> dict[str, Callable[[], object]]:
    """The servers and devices page's reads one by one: the whole 30 days with no filter, and the last 48 h."""
    from datetime import timedelta

    from django.db.models import Max

    from analysis.dashboard import devices, selectors
    from analysis.filters import TaskFilters
    from ingest.models import Task

    f = TaskFilters()
    newest = Task.objects.filter(project=project).aggregate(last=Max("started_at"))["last"]
    last_days = TaskFilters(since=newest - timedelta(hours=48), until=newest)
    names = [d.name for d in selectors.project_devices(project=project)]
    servers = [d.name for d in selectors.project_devices(project=project) if d.role != "gpu"]
    return {
        "devices: verdict groups (first page, with the counts per device)": lambda: devices.verdict_groups(project=project, filters=f),
        "devices: server vs client breakdown (6 servers)": lambda: devices.serving_breakdown(
            project=project, filters=f, servers=servers),
        "devices: telemetry buckets (18 devices, 30 days)": lambda: devices.telemetry(project=project, filters=f,
                                                                                       devices=names),
        "devices: telemetry buckets (18 devices, the last 48 h: raw samples)": lambda: devices.telemetry(
            project=project, filters=last_days, devices=names),
    }


# --- why was this one slow, sessions, search (docs/scaling.md) ---------------------------------

PAIR_TURNS, PAIR_PER_TURN = 1000, 10  # two tasks of 10,000 steps (+ root) in a project of their own


def _pair(project_name: str = "bench-diff"):
    """Two 10,000-step tasks in a project of their own (the query dataset's step count, which
    decides whether it is reloaded, stays as it is): 1,000 turns of an LLM call and 9 tool calls;
    pair-a has one extra call in turn 500 and a slower LLM call in turn 700. Made once."""
    from django.db import connection

    from ingest import partitions
    from ingest.models import Project, Task

    project, _ = Project.objects.get_or_create(name=project_name)
    if Task.objects.filter(project=project, task_id__in=["pair-a", "pair-b"]).count() == 2:
        return project
    from datetime import UTC, datetime, timedelta

    start = datetime.now(tz=UTC).replace(microsecond=0) - timedelta(days=1)
    partitions.ensure(table="ingest_step", times=[start, start + timedelta(hours=2)])
    n = PAIR_TURNS * PAIR_PER_TURN
    with connection.cursor() as cur:
        cur.execute("DELETE FROM ingest_task WHERE project_id = %s", [project.pk])
        for task_id in ("pair-a", "pair-b"):
            extra = task_id == "pair-a"
            cur.execute("""
                INSERT INTO ingest_task (project_id, task_id, name, release, environment, session_id, started_at,
                    ended_at, duration_ms, status, attributes, reported, step_count, input_tokens, output_tokens,
                    error_count, last_event_at, name_given)
                VALUES (%s, %s, 'pair-agent', 'v1', 'production', '', %s, %s + interval '2 hours', 7200000, 'ok',
                        '{}', true, %s, 0, 0, 0, now(), true) RETURNING id""",
                        [project.pk, task_id, start, start, n + 1 + int(extra)])
            pk = cur.fetchone()[0]
            cur.execute("""
                INSERT INTO ingest_step (project_id, task_id, step_id, parent_step_id, kind, name, started_at,
                    ended_at, duration_ms, status, error, depends_on, attributes, events, model, provider, device,
                    tool_name, tool_args, ttft_ms)
                SELECT %(p)s, %(t)s, 's' || k || '.' || j, 'root', CASE WHEN j = 0 THEN 'llm' ELSE 'tool' END,
                       CASE WHEN j = 0 THEN 'chat' ELSE 'call ' || j END,
                       %(s)s + make_interval(secs => (k * %(per)s + j) * 0.5),
                       %(s)s + make_interval(secs => (k * %(per)s + j) * 0.5 + d / 1000.0), d, 'ok', '', '{}', '{}',
                       '[]', CASE WHEN j = 0 THEN 'm' ELSE '' END, '', CASE WHEN j = 0 THEN 'gpu-0' ELSE '' END,
                       CASE WHEN j = 0 THEN '' ELSE 'call ' || j END,
                       CASE WHEN j = 0 THEN NULL ELSE jsonb_build_object('k', k) END,
                       CASE WHEN j = 0 THEN d / 3 END
                FROM generate_series(0, %(turns)s - 1) k, generate_series(0, %(per)s - 1) j,
                     LATERAL (SELECT CASE WHEN %(extra)s AND k = 700 AND j = 0 THEN 450.0 ELSE 200.0 END AS d) x""",
                        {"p": project.pk, "t": pk, "s": start, "per": PAIR_PER_TURN, "turns": PAIR_TURNS, "extra": extra})
            cur.execute("""
                INSERT INTO ingest_step (project_id, task_id, step_id, parent_step_id, kind, name, started_at,
                    ended_at, duration_ms, status, error, depends_on, attributes, events, model, provider, device,
                    tool_name)
                VALUES (%(p)s, %(t)s, 'root', '', 'agent', 'pair-agent', %(s)s, %(s)s + interval '2 hours', 7200000,
                        'ok', '', '{}', '{}', '[]', '', '', '', '')""", {"p": project.pk, "t": pk, "s": start})
            if extra:
                cur.execute("""
                    INSERT INTO ingest_step (project_id, task_id, step_id, parent_step_id, kind, name, started_at,
                        ended_at, duration_ms, status, error, depends_on, attributes, events, model, provider,
                        device, tool_name)
                    VALUES (%(p)s, %(t)s, 'extra', 'root', 'tool', 'search', %(s)s + interval '2501 seconds',
                            %(s)s + interval '2501.3 seconds', 300, 'ok', '', '{}', '{}', '[]', '', '', '', 'search')""",
                            {"p": project.pk, "t": pk, "s": start})
    return project


def _search_rows(project) -> None:
    """Text and attributes to search for in the query dataset (its loader writes no errors and
    empty attributes): an error on one tool call in 1,000 tasks (a distinctive order id each) and
    an attribute on the first LLM call of one task in 100. Updates only: the step count, which
    decides whether the dataset is reloaded, stays as it is. Made once."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM ingest_step WHERE project_id = %s AND error LIKE 'HTTP 503%%' LIMIT 1",
                    [project.pk])
        if cur.fetchone():
            return
        cur.execute("""UPDATE ingest_step SET error = 'HTTP 503 from upstream: order ord_' || task_id::text || 'x'
                       WHERE project_id = %s AND step_id = 's1' AND task_id %% 1000 = 0""", [project.pk])
        cur.execute("""UPDATE ingest_step SET attributes = '{"gen_ai.system": "openai", "user_tier": "pro"}'
                       WHERE project_id = %s AND step_id = 's0' AND task_id %% 100 = 0""", [project.pk])
        cur.execute("ANALYZE ingest_step")


def _comparison_queries(project) -> dict[str, Callable[[], object]]:
    """Typical profile, a task against it, a 10,000-step pair, sessions and search, through the
    product's selectors and API (whole requests where the API is named)."""
    from django.core.cache import cache
    from django.test import Client

    from analysis.comparison import diff
    from analysis.dashboard import selectors, sessions
    from analysis.filters import TaskFilters
    from ingest.models import IngestKey, Task
    from ingest.services import key_create

    _search_rows(project)
    pair = _pair()
    keys = {p.pk: key_create(project=p, scopes=[IngestKey.SCOPE_READ])[1] for p in (project, pair)}

    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="bench", defaults={"is_superuser": True})
    browser = Client()
    browser.force_login(user)

    def page(p, path):
        def get():
            response = browser.get(path + ("&" if "?" in path else "?") + f"project={p.name}")
            assert response.status_code == 200, (path, response.status_code)
            return response.content
        return get

    def api(p, path):
        def get():
            response = Client().get(path, HTTP_AUTHORIZATION=f"Bearer {keys[p.pk]}")
            assert response.status_code == 200, (path, response.status_code, response.content[:200])
            return response.content
        return get

    def cold_profile():
        cache.clear()  # built from its runs every time, as on the first visit after new runs
        typical, reason = diff.typical_profile(project=project, name="checkout-agent", release="v2")
        assert typical is not None, reason
        return typical

    slow = (Task.objects.filter(project=project, name="checkout-agent", release="v2")
            .order_by("-started_at").values_list("task_id", flat=True).first())
    some_session = Task.objects.filter(project=project).exclude(session_id="").values_list(
        "session_id", flat=True).first()
    f = TaskFilters()

    def search(**kwargs):
        return lambda: selectors.task_list(project=project, filters=TaskFilters(**kwargs), limit=50)

    return {
        "diff: typical profile build (200 runs, 4,000 steps; cache cleared)": cold_profile,
        "diff: task vs typical (API, profile cached)": api(project, f"/api/v1/tasks/{slow}/diff?against=typical"),
        "diff: 10,000-step pair (API, whole request)": api(pair, "/api/v1/tasks/pair-a/diff?against=pair-b"),
        "session list: newest first": lambda: sessions.session_list(project=project, filters=f),
        "session list: by turns": lambda: sessions.session_list(project=project, filters=f, sort="-turns"),
        "session list: by total time": lambda: sessions.session_list(project=project, filters=f, sort="-total_ms"),
        "session list: by slowest turn": lambda: sessions.session_list(project=project, filters=f, sort="-slowest_ms"),
        "session list: API, release v2, by total time": api(project, "/api/v1/sessions?release=v2&sort=-total_ms"),
        "session detail (API)": api(project, f"/api/v1/sessions/{some_session}"),
        "session: time per user turn (overview JSON)": page(project, "/charts/turn-time.json"),
        "session: latency page grouped by session": page(project, "/latency?group_by=session"),
        "session: latency charts JSON grouped by session": page(project, "/charts/latency.json?group_by=session"),
        "search text: a rare id (q=ord_…, 1 task)": search(q="ord_2000x"),
        "search text: error words (error=\"HTTP 503\", 500 tasks)": search(error='"HTTP 503"'),
        "search text: a common word (q=id, every task)": search(q="id"),
        "search: attribute (attr=gen_ai.system:openai, 5,000 tasks)": search(attr="gen_ai.system:openai"),
        "search: a step over 2 s (min_step_ms=2000)": search(min_step_ms=2000.0),
        "search: tool + step over 1 s": search(tool="search_inventory", min_step_ms=1000.0),
        "search: a mapped attribute (attr=gen_ai.tool.name:search_inventory)": search(
            attr="gen_ai.tool.name:search_inventory"),
        "search: a token count no step has (attr=gen_ai.usage.input_tokens:1234)": search(
            attr="gen_ai.usage.input_tokens:1234"),
        "search: a rare token count (attr=gen_ai.usage.output_tokens:40, the big task)": search(
            attr="gen_ai.usage.output_tokens:40"),
        "search: a TTFT no step has (attr=gen_ai.response.time_to_first_chunk:0.1234)": search(
            attr="gen_ai.response.time_to_first_chunk:0.1234"),
        "search: a cached-token count (attr=gen_ai.usage.cache_read.input_tokens:7)": search(
            attr="gen_ai.usage.cache_read.input_tokens:7"),
        "search: the stream flag (attr=gen_ai.request.stream:false)": search(attr="gen_ai.request.stream:false"),
        "search: a tool no step calls (tool=refund_policy)": search(tool="refund_policy"),
        "search: a tool pattern (tool=*inventory*)": search(tool="*inventory*"),
        "search: the list's count (tool=search_inventory, up to 10,000)": lambda: selectors.task_count(
            project=project, filters=TaskFilters(tool="search_inventory")),
        "search: known tools (API)": api(project, "/api/v1/search/values?field=tool&q=inv"),
    }
