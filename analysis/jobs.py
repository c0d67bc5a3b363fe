"""Periodic jobs one project at a time (docs/reliability.md, "One tenant's data cannot stall the
others"): each project's part of a job runs in a transaction of its own. A part that raises is
rolled back, logged, counted per (job, project) in `JobFailure` (shown by /api/v1/status) and
tried again after a back-off that doubles with each failure in a row; the other projects' parts
run as if nothing happened. A success clears the count."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction
from django.utils import timezone

from analysis.models import JobFailure

log = logging.getLogger("agentops.analysis")

# The wait before a failed part is tried again: BACKOFF_FIRST_SECONDS after the first failure,
# doubled with each one in a row, at most BACKOFF_MAX_SECONDS (a part that failed for a day is
# still tried every hour, so a fixed cause clears itself).
BACKOFF_FIRST_SECONDS = 60
BACKOFF_MAX_SECONDS = 3600
MAX_ERROR_CHARS = 1000

# The jobs that run per project, by the name they are counted under.
ROLLUPS = "rollups"
RETENTION = "retention"
BASELINES = "baselines"
LEARNED_PAIRS = "learned_pairs"
ALERTS = "alerts"

T = TypeVar("T")


class Failed:
    """What `ProjectJob.run` answers for a part that raised (falsy)."""

    def __bool__(self) -> bool:
        return False


FAILED = Failed()


def backoff(failures: int) -> timedelta:
    return timedelta(seconds=min(BACKOFF_MAX_SECONDS, BACKOFF_FIRST_SECONDS * 2 ** max(0, min(failures - 1, 16))))


class ProjectJob:
    """One run of a periodic job over projects. Reads the job's failures once; `due` says whether
    a project's part should run now (not waiting out a back-off); `run` runs it isolated."""

    def __init__(self, name: str, *, now: datetime | None = None) -> None:
        self.name = name
        self.now = now or timezone.now()
        self.failing = {row.project_id: row for row in JobFailure.objects.filter(job=name)}

    def due(self, project_id: int) -> bool:
        row = self.failing.get(project_id)
        return row is None or row.retry_at <= self.now

    def run(self, project_id: int, part: Callable[[], T]) -> T | Failed:
        """`part()` in a transaction (a savepoint inside a caller's). Its exception is caught,
        logged and counted; a Celery soft time limit is not a project's fault and goes up."""
        try:
            with transaction.atomic():
                out = part()
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:
            log.exception("analysis.job_failed job=%s project=%s", self.name, project_id)
            self.failed(project_id, exc)
            return FAILED
        self.succeeded(project_id)
        return out

    def succeeded(self, project_id: int) -> None:
        if project_id in self.failing:
            JobFailure.objects.filter(job=self.name, project_id=project_id).delete()
            del self.failing[project_id]
            log.info("analysis.job_recovered job=%s project=%s", self.name, project_id)

    def failed(self, project_id: int, exc: Exception) -> None:
        """Count a failure of the project's part (`run` does; a job that isolates finer units,
        such as alert rules, reports its project's outcome itself)."""
        row = self.failing.get(project_id)
        failures = (row.failures if row else 0) + 1
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        row, _ = JobFailure.objects.update_or_create(
            job=self.name, project_id=project_id,
            defaults={"failures": failures, "last_error_at": self.now, "last_error": error,
                      "retry_at": self.now + backoff(failures)},
            create_defaults={"failures": failures, "first_error_at": self.now, "last_error_at": self.now,
                             "last_error": error, "retry_at": self.now + backoff(failures)})
        self.failing[project_id] = row


def failures_of(*, project_id: int) -> dict[str, dict]:
    """The project's failing jobs, for /api/v1/status: {job: {failures, first/last error time,
    last error, retry at}}."""
    return {row.job: {"failures": row.failures, "first_error_at": row.first_error_at.isoformat(),
                      "last_error_at": row.last_error_at.isoformat(), "last_error": row.last_error,
                      "retry_at": row.retry_at.isoformat()}
            for row in JobFailure.objects.filter(project_id=project_id).order_by("job")}


def forget(*, project_id: int) -> None:
    JobFailure.objects.filter(project_id=project_id).delete()
