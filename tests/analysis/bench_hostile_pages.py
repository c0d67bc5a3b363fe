"""Bytes and server time of the pages hostile cardinality used to blow up (issue #39.3): the agent
API and page of an agent with a 1,000-call turn's learned pairs (499,500), and /instrumentation
(page and API) of a project with 20,000 services, each with its own scope. Not part of the suite
(the file name does not start with test_); it fills this run's throwaway test database:

    nice -n 10 .venv/bin/python -m pytest tests/analysis/bench_hostile_pages.py -s -q

Each URL is fetched through the Django test client (no network) BENCH_REPEAT times (default 2):
the answer's bytes, the first and best time, and the growth of the process's peak RSS across its
fetches. Results print and land in test-artifacts/bench-hostile-pages.json."""

from __future__ import annotations

import json
import os
import resource
import time

import pytest
from django.contrib.auth import get_user_model

from ingest.services import key_create
from tests.analysis.crowds import insert_services, insert_wide_turn
from tests.browser.conftest import ARTIFACTS

REPEAT = int(os.environ.get("BENCH_REPEAT", "2"))
CALLS = int(os.environ.get("BENCH_CALLS", "1000"))
SERVICES = int(os.environ.get("BENCH_SERVICES", "20000"))


@pytest.mark.django_db
def test_bench_hostile_pages(client, project):
    started = time.perf_counter()
    pairs = insert_wide_turn(project, "wide-agent", calls=CALLS)
    insert_services(project, services=SERVICES)
    filled = time.perf_counter() - started
    user = get_user_model().objects.create_user("bench", password="pw")
    project.members.add(user)
    client.force_login(user)
    key = key_create(project=project, scopes=["read"])[1]
    urls = {
        "agent API": ("/api/v1/agents/wide-agent", {"HTTP_AUTHORIZATION": f"Bearer {key}"}),
        "agent page": ("/agents/wide-agent", {}),
        "instrumentation page": ("/instrumentation", {}),
        "instrumentation API": ("/api/v1/instrumentation", {"HTTP_AUTHORIZATION": f"Bearer {key}"}),
    }
    results = {"pairs": pairs, "services": SERVICES, "fill_s": round(filled, 1), "urls": {}}
    for label, (url, headers) in urls.items():
        times, size, status = [], 0, 0
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for _ in range(REPEAT):
            t = time.perf_counter()
            r = client.get(url, {"project": project.name}, **headers)
            body = b"".join(r.streaming_content) if r.streaming else r.content
            times.append(time.perf_counter() - t)
            size, status = len(body), r.status_code
            del r, body
        peak_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
        results["urls"][label] = {"url": url, "status": status, "bytes": size, "first_s": round(times[0], 3),
                                  "best_s": round(min(times), 3), "peak_rss_growth_mb": round(peak_growth, 1)}
        print(f"{label:22} {status} {size:>12,} B  first {times[0]:7.3f} s  best {min(times):7.3f} s"
              f"  peak RSS +{peak_growth:,.0f} MB", flush=True)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "bench-hostile-pages.json").write_text(json.dumps(results, indent=2))
