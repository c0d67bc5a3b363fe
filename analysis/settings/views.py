"""Settings pages. Who reaches what: a project's settings are for its admins (a member who is not
gets 403, anyone else 404, as for a project that does not exist); model prices for whoever holds
the price permissions (analysis.access). Mutations are POST only, CSRF-checked, and answer bad
input with the page again, status 400, saying what is wrong."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from analysis.access import (
    admin_projects_for_user,
    can_edit_prices,
    can_reach_settings,
    projects_for_user,
    role_for_user,
)
from analysis.costs import price_save
from analysis.models import ModelPrice
from analysis.settings import selectors
from analysis.settings.forms import (
    ROLE_HELP,
    SCOPE_HELP,
    KeyForm,
    MemberAddForm,
    PriceForm,
    RoleForm,
)
from ingest.models import IngestKey, ProjectMembership
from ingest.services import key_create, key_revoke, member_add, member_remove, member_role_set


def _admin_project(request, name: str):
    project = projects_for_user(request.user).filter(name=name).first()
    if project is None:
        raise Http404("no such project")
    if role_for_user(request.user, project) != ProjectMembership.ROLE_ADMIN:
        raise PermissionDenied("only the project's admins change its settings")
    return project


def _page(request, template: str, *, project=None, section: str, status: int = 200, **context):
    return render(request, f"settings/{template}", {
        "project": project, "section": section, "can_edit_prices": can_edit_prices(request.user),
        "admin_projects": admin_projects_for_user(request.user), **context}, status=status)


@login_required
@require_GET
def settings_home(request):
    if not can_reach_settings(request.user):
        raise PermissionDenied("settings are for project admins")
    return _page(request, "home.html", section="home")


# --- keys ------------------------------------------------------------------------------------


def _keys_page(request, project, *, form=None, new_key=None, status=200):
    return _page(request, "keys.html", project=project, section="keys", status=status,
                 keys=selectors.key_list(project=project), form=form or KeyForm(initial={"scopes": ["ingest"]}),
                 scope_help=SCOPE_HELP, new_key=new_key)


@login_required
@require_GET
def keys(request, project):
    return _keys_page(request, _admin_project(request, project))


@never_cache  # the response carries the key's secret, this once
@login_required
@require_POST
def key_new(request, project):
    project = _admin_project(request, project)
    form = KeyForm(request.POST)
    if not form.is_valid():
        return _keys_page(request, project, form=form, status=400)
    key, plaintext = key_create(project=project, scopes=form.cleaned_data["scopes"],
                                name=form.cleaned_data["name"], actor=request.user)
    return _keys_page(request, project, new_key={"key": key, "plaintext": plaintext})


@login_required
@require_POST
def key_revoke_view(request, project, prefix):
    project = _admin_project(request, project)
    key = IngestKey.objects.filter(project=project, prefix=prefix).select_related("project").first()
    if key is None:
        raise Http404("no such key")
    key_revoke(key=key, actor=request.user)
    return redirect(reverse("settings-keys", args=[project.name]))


# --- members ---------------------------------------------------------------------------------


def _members_page(request, project, *, form=None, error="", status=200):
    members = selectors.member_list(project=project)
    # The last admin cannot be removed (services.member_remove refuses): no button that only fails.
    admins = sum(m.role == ProjectMembership.ROLE_ADMIN for m in members)
    return _page(request, "members.html", project=project, section="members", status=status,
                 members=members, last_admin=admins == 1, roles=ProjectMembership.ROLES,
                 role_help=ROLE_HELP, form=form or MemberAddForm(initial={"role": ProjectMembership.ROLE_MEMBER}),
                 error=error)


def _after_member_change(request, project):
    # An admin who made themselves a member (or left) can no longer see these settings.
    if role_for_user(request.user, project) != ProjectMembership.ROLE_ADMIN:
        return redirect(reverse("settings"))
    return redirect(reverse("settings-members", args=[project.name]))


def _membership(project, user_id: int) -> ProjectMembership:
    membership = ProjectMembership.objects.filter(project=project, user_id=user_id).select_related("user").first()
    if membership is None:
        raise Http404("no such member")
    return membership


@login_required
@require_GET
def members(request, project):
    return _members_page(request, _admin_project(request, project))


@login_required
@require_POST
def member_add_view(request, project):
    """Superusers only: a project's admin who could add any username would learn which usernames
    exist (the form says when one does not), and could put another tenant's user in their project
    without asking. Superusers see every user and project anyway."""
    project = _admin_project(request, project)
    if not request.user.is_superuser:
        raise PermissionDenied("members are added by an operator (a superuser)")
    form = MemberAddForm(request.POST)
    if not form.is_valid():
        return _members_page(request, project, form=form, status=400)
    try:
        member_add(project=project, user=form.cleaned_data["user"], role=form.cleaned_data["role"],
                   actor=request.user)
    except ValueError as exc:
        return _members_page(request, project, form=form, error=str(exc), status=400)
    return redirect(reverse("settings-members", args=[project.name]))


@login_required
@require_POST
def member_role_view(request, project, user_id):
    project = _admin_project(request, project)
    membership = _membership(project, user_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        return _members_page(request, project, error="choose a role: admin or member", status=400)
    try:
        member_role_set(project=project, user=membership.user, role=form.cleaned_data["role"], actor=request.user)
    except ValueError as exc:
        return _members_page(request, project, error=str(exc), status=400)
    return _after_member_change(request, project)


@login_required
@require_POST
def member_remove_view(request, project, user_id):
    project = _admin_project(request, project)
    membership = _membership(project, user_id)
    try:
        member_remove(project=project, user=membership.user, actor=request.user)
    except ValueError as exc:
        return _members_page(request, project, error=str(exc), status=400)
    return _after_member_change(request, project)


# --- retention and audit ---------------------------------------------------------------------


@login_required
@require_GET
def retention(request, project):
    return _page(request, "retention.html", project=_admin_project(request, project), section="retention",
                 retention_days=settings.AGENTOPS_RETENTION_DAYS)


@login_required
@require_GET
def audit(request, project):
    project = _admin_project(request, project)
    before = request.GET.get("before", "")
    entries = selectors.audit_list(project=project, before=int(before) if before.isdigit() else None)
    more = len(entries) == selectors.AUDIT_PAGE
    return _page(request, "audit.html", project=project, section="audit", entries=entries,
                 next_before=entries[-1].pk if more else None)


# --- model prices (the installation's) -------------------------------------------------------


def _prices_page(request, *, form=None, status=200):
    if not can_reach_settings(request.user):
        raise PermissionDenied("settings are for project admins")
    return _page(request, "prices.html", section="prices", status=status, prices=ModelPrice.objects.all(),
                 form=form or PriceForm())


def _price_editor(request) -> None:
    if not can_edit_prices(request.user):
        raise PermissionDenied("changing model prices needs the price permissions (an operator grants them)")


@login_required
@require_GET
def prices(request):
    return _prices_page(request)


@login_required
@require_POST
def price_new(request):
    _price_editor(request)
    form = PriceForm(request.POST)
    if not form.is_valid():
        return _prices_page(request, form=form, status=400)
    price_save(price=ModelPrice(), values=form.cleaned_data, actor=request.user)
    return redirect(reverse("settings-prices"))


@login_required
@require_http_methods(["GET", "POST"])
def price_edit(request, price_id):
    _price_editor(request)
    price = ModelPrice.objects.filter(pk=price_id).first()
    if price is None:
        raise Http404("no such price")
    form = PriceForm(request.POST if request.method == "POST" else None, instance=price)
    if request.method == "POST" and form.is_valid():
        price_save(price=price, values=form.cleaned_data, actor=request.user)
        return redirect(reverse("settings-prices"))
    return _page(request, "price_edit.html", section="prices", price=price, form=form,
                 status=400 if form.is_bound else 200)
