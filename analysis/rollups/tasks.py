"""The rollups' Celery task, run by beat every REFRESH_SECONDS."""

from __future__ import annotations

from celery import shared_task

from analysis.rollups.refresh import rollups_refresh


@shared_task(name="analysis.refresh_rollups")
def refresh_rollups() -> dict[str, int]:
    """Recompute the latency rollup hours that changed since the last run (docs/rollups.md)."""
    return rollups_refresh()
