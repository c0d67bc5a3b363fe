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
        out["release compare v1 vs v2"] = lambda: release_compare(project=project, a="v1", b="v2")
    return out
