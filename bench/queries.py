"""Dashboard queries on a bulk-loaded dataset: median and p95 of repeated runs of each.

Every query goes through the same selector or view the product uses; a query whose code is not
there yet is reported as skipped rather than timed on a stand-in."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timed(fn: Callable[[], object], *, runs: int = 7) -> dict:
    fn()  # warm the cache and the connection: dashboards are read repeatedly
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {"median_ms": round(statistics.median(samples), 1),
            "p95_ms": round(samples[min(len(samples) - 1, int(0.95 * len(samples)))], 1)}


def query_suite(project) -> dict[str, Callable[[], object]]:
    """The queries to time, by name, built against the product's own selectors."""
    from django.test import Client

    from analysis import selectors
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
        from analysis.selectors import latency_percentiles
    except ImportError:
        latency_percentiles = None
    if latency_percentiles is not None:
        from analysis.filters import TaskFilters

        for group in ("task", "kind", "model"):
            out[f"latency percentiles by {group}"] = (
                lambda g=group: latency_percentiles(project=project, group_by=g, filters=TaskFilters()))
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
    out.update(_pages(project))
    return out


def _dashboard_queries(project) -> dict[str, Callable[[], object]]:
    """The selectors behind the Overview and Latency pages (whole 30 days, no filter: the
    default view and the worst case)."""
    from analysis import dashboard
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
    }
    out = {}
    for label, (name, kwargs) in wanted.items():
        fn = getattr(dashboard, name, None)
        if fn is not None:
            out[label] = lambda fn=fn, kwargs=kwargs: fn(project=project, filters=f, **kwargs)
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
        def get():
            response = client.get(path, {"project": project.name})
            assert response.status_code == 200, (path, response.status_code)
            return response.content
        return get

    return {"page: overview charts JSON": page("/charts/overview.json"),
            "page: latency charts JSON": page("/charts/latency.json"),
            "page: devices (table of 6 devices)": page("/devices"),
            "page: devices charts JSON": page("/charts/devices.json"),
            "page: releases list": page("/releases"),
            "page: task detail waterfall JSON (50,000 steps)": page("/tasks/big-task/waterfall.json")}
