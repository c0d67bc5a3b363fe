"""Reads of the settings pages, each for one project: its keys, its members, its audit trail
(with the installation-wide entries, prices, that concern every project)."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from ingest.models import AuditEntry, IngestKey, Project, ProjectMembership

AUDIT_PAGE = 100


def key_list(*, project: Project) -> QuerySet[IngestKey]:
    return IngestKey.objects.filter(project=project).order_by("revoked_at", "-created_at", "-id")


def member_list(*, project: Project) -> QuerySet[ProjectMembership]:
    return ProjectMembership.objects.filter(project=project).select_related("user").order_by("user__username")


def audit_list(*, project: Project, before: int | None = None) -> list[AuditEntry]:
    """Newest first, AUDIT_PAGE at a time (keyset on id: `before` is the last id shown)."""
    entries = AuditEntry.objects.filter(Q(project=project) | Q(project__isnull=True))
    if before is not None:
        entries = entries.filter(id__lt=before)
    page = list(entries.order_by("-id")[:AUDIT_PAGE])
    for entry in page:
        entry.details_text = details_text(entry.details)
    return page


def details_text(details: dict) -> str:
    """`{"from": "member", "to": "admin"}` as "from: member; to: admin"; lists joined, objects as k=v."""
    def one(value) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k}={one(v)}" for k, v in value.items())
        if isinstance(value, list):
            return ", ".join(one(v) for v in value)
        return str(value)
    return "; ".join(f"{key}: {one(value)}" for key, value in details.items())
