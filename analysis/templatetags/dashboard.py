"""Template tags of the dashboard layout: the top bar (navigation, project switcher, global
filters) works on every page, including pages whose views know nothing about it; durations, and
percentiles read from the latency histogram marked "≈" with their bound."""

from __future__ import annotations

from decimal import Decimal
from urllib.parse import urlencode

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from analysis import rollups
from analysis.access import can_reach_settings, project_for_user, projects_for_user
from analysis.dashboard import selectors
from analysis.dashboard.charts import lower_bound_ms
from analysis.dashboard.links import entity_url
from analysis.filters import RANGE_PRESETS
from analysis.units import fmt_ms, fmt_ts, fmt_value

register = template.Library()

GLOBAL_PARAMS = ("project", "range", "since", "until", "release", "environment")
NAV = [("overview", "Overview"), ("tasks", "Tasks"), ("sessions", "Sessions"), ("latency", "Latency"), ("devices", "Devices"),
       ("releases", "Releases"), ("alerts", "Alerts"), ("instrumentation", "Instrumentation")]


def _url(name: str) -> str | None:
    try:
        return reverse(name)
    except NoReverseMatch:
        return None


@register.inclusion_tag("analysis/_topbar.html", takes_context=True)
def topbar(context):
    request = context["request"]
    user = request.user
    params = request.GET
    project = context.get("project")
    if project is None and user.is_authenticated:
        project = project_for_user(user, params.get("project"))
    query = urlencode({k: params[k] for k in GLOBAL_PARAMS if params.get(k)})
    nav = [(label, url, request.path == url) for name, label in NAV if (url := _url(name))]
    in_settings = request.path.startswith(("/settings/", "/projects/"))
    if user.is_authenticated and can_reach_settings(user):
        nav.append(("Settings", reverse("settings"), in_settings))
    return {
        "request": request, "project": project, "query": query, "nav": nav,
        "filters": not in_settings,  # the settings pages filter nothing by time, release or environment
        "projects": projects_for_user(user) if user.is_authenticated else [],
        "presets": list(RANGE_PRESETS), "values": {k: params.get(k, "") for k in GLOBAL_PARAMS},
        "releases": selectors.project_releases(project=project) if project else [],
        "environments": selectors.project_environments(project=project) if project else [],
        # Page-specific parameters ride along when the global filters change (minus the cursor:
        # a new filter starts from the first page).
        "carry": [(k, v) for k in params if k not in GLOBAL_PARAMS and k != "cursor"
                  for v in params.getlist(k)],
    }


@register.filter
def per_million(value):
    """A price per million tokens as people write it: $0.59, $2.50, $0.075 (up to six decimals,
    never trailing zeros past the cents)."""
    if value is None:
        return ""
    text = f"{Decimal(value):.6f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"{whole}.{cents.ljust(2, '0')}"


@register.filter
def ms(value):
    return fmt_ms(value)


@register.filter
def lower_bound(value):
    """A percentile as a link's min_duration_ms (charts.lower_bound_ms)."""
    return lower_bound_ms(value)


@register.filter
def approx_ms(value):
    """A percentile from the latency histogram: "≈4.55 s", its bound and origin in the tooltip
    (docs/rollups.md, "One percentile per page")."""
    if value is None:
        return "–"
    return format_html('<span class="approx" title="{}">≈{}</span>', rollups.APPROXIMATE_NOTE, fmt_ms(value))


@register.simple_tag
def approx_bound():
    """The bound itself, for the page to show beside the figures it qualifies: "±1.9 %"."""
    return rollups.APPROXIMATE_BOUND


@register.inclusion_tag("analysis/_approx_note.html")
def approx_note():
    """One line under a table of histogram percentiles saying what "≈" means."""
    return {"bound": rollups.APPROXIMATE_BOUND, "note": rollups.APPROXIMATE_NOTE}


@register.filter
def metric(value, unit):
    """A metric's value in its unit, as every page and alert writes it (units.fmt_value)."""
    return fmt_value(value, unit or "")


@register.filter
def ts(value, precision="second"):
    """A timestamp that says its zone: <time datetime="…" data-ts="second">2026-11-30 14:02:07
    UTC</time>. The top bar's UTC/local switch rewrites every one of them (app.js)."""
    if value is None:
        return "–"
    return format_html('<time datetime="{}" data-ts="{}">{}</time>', value.isoformat(), precision,
                       fmt_ts(value, precision))


@register.simple_tag(takes_context=True)
def entity_link(context, kind, name, text=None):
    """<a class="entity-link" href="…">name</a>: a tool or model to its tasks, a device or
    server to the Devices page, an agent to its call graph, a session to its turns
    (analysis.dashboard.links), keeping the page's global filters. Escaped like any value."""
    request = context.get("request")
    params = {k: request.GET[k] for k in GLOBAL_PARAMS if request is not None and request.GET.get(k)}
    url = entity_url(kind, name or "", params)
    label = name if text is None else text
    if not url:
        return format_html("{}", label or "")
    return format_html('<a class="entity-link" data-entity="{}" href="{}">{}</a>', kind, url, label)
