"""Dashboard pages: short functions that call selectors and render."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from analysis.access import project_for_user, projects_for_user


@login_required
def overview(request):
    project = project_for_user(request.user, request.GET.get("project"))
    return render(request, "analysis/overview.html", {
        "project": project,
        "projects": projects_for_user(request.user),
    })
