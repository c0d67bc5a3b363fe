"""Alert pages: the rules list, a rule's history and chart, the create/edit form with a live
preview, mute and delete. Short functions; validation is the API's serializer, so the form and
the API accept exactly the same rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from analysis.access import project_for_user, projects_for_user
from analysis.alerts import charts, evaluation, selectors
from analysis.alerts.metrics import FINDING_METRICS, METRICS, MetricSpec, series, unit
from analysis.alerts.models import AlertRule
from analysis.alerts.serializers import SECRET_MASK, AlertRuleSerializer
from ingest.records import STEP_KINDS

CHART_POINTS = 36
PREVIEW_POINTS = 24


def _list_url(project) -> str:
    return f"{reverse('alerts')}?{urlencode({'project': project.name})}"


def _rule_for_user(request, rule_id: int) -> AlertRule:
    rule = AlertRule.objects.filter(pk=rule_id, project__in=projects_for_user(request.user)) \
        .select_related("project").first()
    if rule is None:
        raise Http404("no such alert rule")
    return rule


def _form_choices() -> dict:
    return {
        "metrics": [(name, label) for name, (_, _, label) in METRICS.items()],
        "finding_metrics": sorted(FINDING_METRICS),
        "step_kinds": STEP_KINDS,
        "filter_keys": AlertRule.FILTER_KEYS,
        "baselines": AlertRule.BASELINES,
        "no_data_behaviours": AlertRule.NO_DATA_BEHAVIOURS,
        "units": {name: unit(name) for name in METRICS},
    }


def form_data(post, *, instance: AlertRule | None = None) -> dict:
    """The form's fields as the API's JSON. The form edits the first webhook and the first
    email channel; further channels (added through the API) are kept."""
    data = {key: post.get(key, "").strip() for key in (
        "name", "metric", "finding_kind", "comparator", "threshold", "window_minutes", "for_minutes",
        "min_samples", "baseline", "baseline_release", "no_data")}
    data["enabled"] = post.get("enabled") == "on"
    data["muted"] = post.get("muted") == "on"
    data["filters"] = {key: post.get(f"filter_{key}", "").strip() for key in AlertRule.FILTER_KEYS}
    channels = []
    if post.get("webhook_url", "").strip():
        channels.append({"type": "webhook", "url": post["webhook_url"].strip(),
                         "secret": post.get("webhook_secret", "").strip()})
    if post.get("email_to", "").strip():
        channels.append({"type": "email", "to": [a.strip() for a in post["email_to"].split(",") if a.strip()]})
    kept = instance.channels[:] if instance else []
    for kind in ("webhook", "email"):
        first = next((c for c in kept if c.get("type") == kind), None)
        if first is not None:
            kept.remove(first)
    data["channels"] = channels + kept
    return data


def _initial(rule: AlertRule | None) -> dict:
    if rule is None:
        return {"metric": "task_duration_p95", "comparator": "gt", "window_minutes": 10, "for_minutes": 0,
                "min_samples": 20, "baseline": "none", "no_data": "keep", "enabled": True, "filters": {}}
    webhook = next((c for c in rule.channels if c.get("type") == "webhook"), {})
    email = next((c for c in rule.channels if c.get("type") == "email"), {})
    return {**AlertRuleSerializer(rule).data, "webhook_url": webhook.get("url", ""),
            "webhook_secret": SECRET_MASK if webhook.get("secret") else "",
            "email_to": ", ".join(email.get("to", []))}


def _values_from_post(data: dict, post) -> dict:
    """Re-display what the user typed after a validation error."""
    return {**data, "webhook_url": post.get("webhook_url", ""), "webhook_secret": post.get("webhook_secret", ""),
            "email_to": post.get("email_to", "")}


def _errors(serializer_errors: dict) -> dict:
    return {key: " ".join(str(m) for m in (msgs if isinstance(msgs, list) else [msgs]))
            for key, msgs in serializer_errors.items()}


def _form(request, *, project, rule: AlertRule | None):
    if request.method == "POST":
        data = form_data(request.POST, instance=rule)
        serializer = AlertRuleSerializer(rule, data=data)
        if serializer.is_valid():
            saved = serializer.save(**({} if rule else {"project": project}))
            return redirect(reverse("alert-detail", args=[saved.pk]))
        values, errors = _values_from_post(data, request.POST), _errors(serializer.errors)
        status = 400
    else:
        values, errors, status = _initial(rule), {}, 200
    return render(request, "alerts/form.html", {
        "project": project, "projects": projects_for_user(request.user), "rule": rule,
        "values": values, "errors": errors, **_form_choices()}, status=status)


@login_required
def rule_list(request):
    name = request.GET.get("project")
    project = project_for_user(request.user, name)
    if project is None and name:
        raise Http404("no such project")  # like every other page: never a silent empty list
    rules = list(selectors.rule_list(project=project)) if project else []
    for rule in rules:
        values = [v for _, v in (rule.recent or [])][-60:]
        threshold = rule.threshold if rule.baseline == AlertRule.BASELINE_NONE else None
        rule.spark = charts.sparkline_points(values, threshold=threshold)
        rule.unit = unit(rule.metric, rule.baseline)
        rule.metric_label = evaluation.metric_label(rule.metric)
    return render(request, "alerts/list.html", {
        "project": project, "projects": projects_for_user(request.user), "rules": rules})


@login_required
def rule_create(request):
    project = project_for_user(request.user, request.GET.get("project") or request.POST.get("project"))
    if project is None:
        raise Http404("no such project")
    return _form(request, project=project, rule=None)


@login_required
def rule_edit(request, rule_id: int):
    rule = _rule_for_user(request, rule_id)
    return _form(request, project=rule.project, rule=rule)


@login_required
def rule_detail(request, rule_id: int):
    rule = _rule_for_user(request, rule_id)
    events, _ = selectors.event_list(project=rule.project, rule_id=rule.pk, limit=100)
    return render(request, "alerts/detail.html", {
        "project": rule.project, "projects": projects_for_user(request.user), "rule": rule,
        "events": events, "unit": unit(rule.metric, rule.baseline),
        "metric_label": evaluation.metric_label(rule.metric),
        "evaluations_needed": evaluation.evaluations_needed(rule)})


def _figure(*, project, spec: MetricSpec, window_minutes: int, points: int, threshold: float,
            baseline_value: float | None, relative: bool, evaluated=()) -> dict:
    now = datetime.now(tz=UTC)
    measured = series(project=project, spec=spec, end=now, points=points,
                      step=timedelta(minutes=window_minutes))
    metric_unit = unit(spec.metric)
    line = threshold
    if relative:
        # The chart shows the metric itself: the threshold is the baseline moved by threshold %.
        line = None if baseline_value is None else baseline_value * (1 + threshold / 100)
    figure = charts.metric_figure(
        times=[m.end for m in measured], values=[m.value for m in measured], threshold=line,
        title=f"{evaluation.metric_label(spec.metric)}, per {window_minutes} min window",
        unit=metric_unit, evaluated=evaluated)
    return {"figure": figure, "counts": [m.sample_count for m in measured]}


@login_required
@require_GET
def rule_chart(request, rule_id: int):
    rule = _rule_for_user(request, rule_id)
    relative = rule.baseline != AlertRule.BASELINE_NONE
    baseline_value = evaluation.observe(rule, now=datetime.now(tz=UTC)).baseline_value if relative else None
    return JsonResponse(_figure(project=rule.project, spec=evaluation.rule_spec(rule),
                                window_minutes=rule.window_minutes, points=CHART_POINTS,
                                threshold=rule.threshold, baseline_value=baseline_value,
                                relative=relative, evaluated=[tuple(p) for p in rule.recent or []]))


@login_required
@require_GET
def preview(request):
    """The metric's recent values for the form as it stands, or the fields that are wrong."""
    project = project_for_user(request.user, request.GET.get("project"))
    if project is None:
        raise Http404("no such project")
    data = form_data(request.GET)
    data["name"] = data["name"] or "preview"
    data["channels"] = []
    serializer = AlertRuleSerializer(data=data)
    if not serializer.is_valid():
        return JsonResponse({"errors": _errors(serializer.errors)}, status=400)
    v = serializer.validated_data
    rule = AlertRule(project=project, **{k: v[k] for k in v if k != "channels"})
    relative = rule.baseline != AlertRule.BASELINE_NONE
    now = datetime.now(tz=UTC)
    obs = evaluation.observe(rule, now=now)
    body = _figure(project=project, spec=evaluation.rule_spec(rule), window_minutes=rule.window_minutes,
                   points=PREVIEW_POINTS, threshold=rule.threshold, baseline_value=obs.baseline_value,
                   relative=relative)
    breaching = obs.has_data and evaluation.breaches(rule, obs.value)
    body["now"] = {"value": obs.value, "sample_count": obs.sample_count, "breaching": breaching,
                   "enough_samples": obs.has_data, "unit": unit(rule.metric, rule.baseline)}
    return JsonResponse(body)


@login_required
@require_POST
def rule_mute(request, rule_id: int):
    rule = _rule_for_user(request, rule_id)
    rule.muted = not rule.muted
    rule.save(update_fields=["muted", "updated_at"])
    if request.POST.get("next") == "list":
        return redirect(_list_url(rule.project))
    return redirect(reverse("alert-detail", args=[rule.pk]))


@login_required
@require_POST
def rule_delete(request, rule_id: int):
    rule = _rule_for_user(request, rule_id)
    project = rule.project
    rule.delete()
    return redirect(_list_url(project))
