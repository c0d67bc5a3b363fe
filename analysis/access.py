"""Which project a request may see. A key sees its own project (with the `read` scope); a user
sees the projects they are a member of (a superuser sees all), chosen by `?project=NAME`."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework.exceptions import NotFound, PermissionDenied

from ingest.models import IngestKey, Project


def projects_for_user(user) -> QuerySet[Project]:
    if getattr(user, "is_superuser", False):
        return Project.objects.all()
    if not getattr(user, "is_authenticated", False) or user.pk is None:
        return Project.objects.none()
    return Project.objects.filter(members=user)


def project_for_user(user, name: str | None) -> Project | None:
    """The named project if the user may see it; else their first project; None if none."""
    projects = projects_for_user(user)
    if name:
        return projects.filter(name=name).first()
    return projects.order_by("name").first()


def request_project(request, *, scope: str = IngestKey.SCOPE_READ) -> Project:
    """The project an API request reads or writes; 403 for a key without the scope, 404 for a
    project the caller may not see (it does not say whether it exists)."""
    if isinstance(request.auth, IngestKey):
        if scope not in request.auth.scopes:
            raise PermissionDenied(f"this key has no '{scope}' scope")
        wanted = request.query_params.get("project")
        if wanted and wanted != request.auth.project.name:
            raise NotFound("no such project")
        return request.auth.project
    project = project_for_user(request.user, request.query_params.get("project"))
    if project is None:
        raise NotFound("no such project")
    return project
