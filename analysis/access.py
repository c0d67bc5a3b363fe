"""Which project a request may see. A key sees its own project (with the `read` scope); a user
sees the projects they are a member of (a superuser sees all), chosen by `?project=NAME`. A
project's settings are for its admins (role `admin`, or a superuser); the installation's model
prices for whoever holds Django's permissions on them (the admin's rule: the demo user, staff)."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework.exceptions import NotFound, PermissionDenied

from ingest.models import IngestKey, Project, ProjectMembership


def projects_for_user(user) -> QuerySet[Project]:
    if getattr(user, "is_superuser", False):
        return Project.objects.all()
    if not getattr(user, "is_authenticated", False) or user.pk is None:
        return Project.objects.none()
    return Project.objects.filter(members=user)


def admin_projects_for_user(user) -> QuerySet[Project]:
    """The projects whose settings this user may change."""
    if getattr(user, "is_superuser", False):
        return Project.objects.all()
    if not getattr(user, "is_authenticated", False) or user.pk is None:
        return Project.objects.none()
    return Project.objects.filter(memberships__user=user, memberships__role=ProjectMembership.ROLE_ADMIN)


def role_for_user(user, project: Project) -> str | None:
    """'admin', 'member', or None for a user who may not see the project."""
    if getattr(user, "is_superuser", False):
        return ProjectMembership.ROLE_ADMIN
    if not getattr(user, "is_authenticated", False) or user.pk is None:
        return None
    return ProjectMembership.objects.filter(project=project, user=user).values_list("role", flat=True).first()


def can_edit_prices(user) -> bool:
    return bool(getattr(user, "is_authenticated", False)
                and user.has_perms(["analysis.add_modelprice", "analysis.change_modelprice"]))


def can_reach_settings(user) -> bool:
    return admin_projects_for_user(user).exists() or can_edit_prices(user)


def project_for_user(user, name: str | None) -> Project | None:
    """The named project if the user may see it; else their default: the project they joined
    first (a superuser: the first by name), so that joining another never changes it; None if none."""
    projects = projects_for_user(user)
    if name:
        return projects.filter(name=name).first()
    if getattr(user, "is_superuser", False):
        return projects.order_by("name").first()
    return projects.filter(memberships__user=user).order_by("memberships__added_at", "name").first()


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
