"""GET /api/v1/status: how far findings and rollups are behind, per project; nothing dropped."""

from __future__ import annotations

from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from analysis.dashboard.status import behind_text
from analysis.engine import batch
from ingest.models import Task
from tests.analysis.factories import make_task


@pytest.fixture
def get(live_server):
    def _get(key, path, **params):
        return requests.get(f"{live_server.url}{path}", params=params,
                            headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return _get


def backlog(project, n: int, *, minutes: float) -> None:
    """`n` ended tasks whose last event was `minutes` ago and that nobody analysed."""
    for i in range(n):
        task = make_task(project, f"late-{i}")
        Task.objects.filter(pk=task.pk).update(last_event_at=timezone.now() - timedelta(minutes=minutes))


def test_status_reports_the_analysis_backlog_and_its_age(get, project, read_key, settings):
    settings.ANALYSIS_QUIET_SECONDS = 5
    backlog(project, 3, minutes=7)
    body = get(read_key, "/api/v1/status").json()
    assert body["project"] == project.name
    assert body["analysis"]["pending_tasks"] == 3
    assert 6.5 * 60 < body["analysis"]["lag_seconds"] < 7.5 * 60
    # 7 minutes less the 5-s quiet period, plus however long this request took to be answered
    assert body["behind"] in ("findings are 6 minutes behind", "findings are 7 minutes behind")
    assert body["behind"] == behind_text(body["analysis"]["lag_seconds"])
    assert set(body["rollups"]) == {"watermark", "lag_seconds", "hours_behind"}
    assert "queue_depth" in body


def test_status_is_current_once_the_backlog_is_analysed(get, project, read_key, settings):
    settings.ANALYSIS_QUIET_SECONDS = 5
    backlog(project, 3, minutes=7)
    while batch.run_due()["analysed"]:
        pass
    body = get(read_key, "/api/v1/status").json()
    assert body["analysis"] == {"lag_seconds": 0.0, "pending_tasks": 0, "oldest_due_at": None}
    assert body["behind"] == ""
    assert Task.objects.filter(project=project, analysis__analyzed_at__isnull=False).count() == 3


def test_status_counts_only_the_callers_project(get, project, other_project, read_key, other_keys, settings):
    settings.ANALYSIS_QUIET_SECONDS = 5
    backlog(other_project, 2, minutes=3)
    assert get(read_key, "/api/v1/status").json()["analysis"]["pending_tasks"] == 0
    assert get(other_keys["read"], "/api/v1/status").json()["analysis"]["pending_tasks"] == 2
    assert get(read_key, "/api/v1/status", project=other_project.name).status_code == 404


def test_status_needs_a_key_or_a_login(live_server):
    assert requests.get(f"{live_server.url}/api/v1/status", timeout=30).status_code in (401, 403)


@pytest.mark.parametrize("seconds, text", [(0, ""), (59, ""), (60, "findings are 1 minute behind"),
                                           (150, "findings are 2 minutes behind")])
def test_behind_text(seconds, text):
    assert behind_text(seconds) == text


def test_the_pages_notice_reuses_the_lag_until_a_batch_of_the_project_is_stored(project, other_project, settings):
    """Every page reads the notice: the count over the sweep's horizon is read once per few
    seconds per project, not once per page, and a stored batch of the project drops it at once
    (a notice never outlives the backlog it describes)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from analysis.dashboard.status import cached_analysis_lag

    settings.ANALYSIS_QUIET_SECONDS = 5
    backlog(project, 2, minutes=9)
    backlog(other_project, 1, minutes=3)
    assert cached_analysis_lag(project=project)["pending_tasks"] == 2
    with CaptureQueriesContext(connection) as reads:
        assert cached_analysis_lag(project=project)["pending_tasks"] == 2
    assert len(reads) == 0
    assert cached_analysis_lag(project=other_project)["pending_tasks"] == 1  # its own entry
    while batch.run_due(project_id=project.pk)["analysed"]:
        pass
    assert cached_analysis_lag(project=project) == {"lag_seconds": 0.0, "pending_tasks": 0, "oldest_due_at": None}
    assert cached_analysis_lag(project=other_project)["pending_tasks"] == 1
