"""Ingest's periodic Celery task: the coming weeks' partitions, and retention."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from ingest import partitions
from ingest.services import data_delete

log = logging.getLogger("agentops.ingest")


# The name predates this module; beat schedules and queued messages use it.
@shared_task(name="analysis.maintain_partitions")
def maintain_partitions() -> dict[str, int]:
    """Create the coming weeks' partitions and, with AGENTOPS_RETENTION_DAYS set, drop what is
    older (whole partitions, then the tasks that started before the cut-off)."""
    created = partitions.ensure_ahead(weeks=2)
    dropped: list[str] = []
    deleted = {"tasks": 0}
    if settings.AGENTOPS_RETENTION_DAYS:
        cutoff = timezone.now() - timedelta(days=settings.AGENTOPS_RETENTION_DAYS)
        dropped = partitions.drop_before(cutoff)
        deleted = data_delete(before=cutoff)
    log.log(logging.INFO if created or dropped or deleted["tasks"] else logging.DEBUG,  # hourly: routine when idle
            "analysis.partitions_maintained created=%d dropped=%d tasks_deleted=%d",
            len(created), len(dropped), deleted["tasks"])
    return {"created": len(created), "dropped": len(dropped), "tasks_deleted": deleted["tasks"]}
