"""Which tasks a release comparison compares: the filters both releases are narrowed to
(`CompareFilters`, parsed from query parameters) and the ended tasks of the releases that pass
them (`compared_tasks`). The comparison (compare.py), its attribution (attribution.py), the pages
and the API all start from these."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef, QuerySet

from analysis.filters import FilterError, TaskFilters, parse_task_filters, task_queryset
from ingest.models import Device, Project, Step, Task


@dataclass(frozen=True)
class CompareFilters:
    """What both releases are narrowed to: task name, environment, device or device vendor,
    time range. Same meaning as the task list's filters."""

    name: str = ""
    environment: str = ""
    device: str = ""
    vendor: str = ""
    since: datetime | None = None
    until: datetime | None = None

    def task_filters(self, release: str = "") -> TaskFilters:
        return TaskFilters(release=release, name=self.name, environment=self.environment,
                           device=self.device, since=self.since, until=self.until)

    def as_query(self) -> dict[str, str]:
        out = {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in asdict(self).items()}
        return {k: v for k, v in out.items() if v not in (None, "")}


def parse_compare_filters(params) -> CompareFilters:
    """Filters from query parameters (environment, name, device, vendor, since, until, range);
    raises FilterError naming a bad parameter."""
    base = parse_task_filters(params)
    vendor = params.get("vendor", "").strip()
    if len(vendor) > 50:
        raise FilterError("vendor: at most 50 characters")
    return CompareFilters(name=base.name, environment=base.environment, device=base.device,
                          vendor=vendor, since=base.since, until=base.until)


def compared_tasks(*, project: Project, releases: list[str], filters: CompareFilters) -> QuerySet[Task]:
    """Ended tasks of the given releases that pass the filters."""
    qs = task_queryset(project=project, filters=filters.task_filters()).filter(
        release__in=releases, duration_ms__isnull=False)
    if filters.vendor:
        devices = Device.objects.filter(project=project, vendor__iexact=filters.vendor).values("name")
        qs = qs.filter(Exists(Step.objects.filter(project=project, task=OuterRef("pk"), device__in=devices)))
    return qs
