from django.urls import path

from analysis.alerts import api, views

urlpatterns = [
    path("api/v1/alerts/rules", api.RuleListView.as_view(), name="api-alert-rule-list"),
    path("api/v1/alerts/rules/<int:rule_id>", api.RuleDetailView.as_view(), name="api-alert-rule-detail"),
    path("api/v1/alerts/events", api.EventListView.as_view(), name="api-alert-event-list"),
    path("alerts/", views.rule_list, name="alerts"),
    path("alerts/new", views.rule_create, name="alert-create"),
    path("alerts/preview", views.preview, name="alert-preview"),
    path("alerts/<int:rule_id>/", views.rule_detail, name="alert-detail"),
    path("alerts/<int:rule_id>/edit", views.rule_edit, name="alert-edit"),
    path("alerts/<int:rule_id>/chart", views.rule_chart, name="alert-chart"),
    path("alerts/<int:rule_id>/mute", views.rule_mute, name="alert-mute"),
    path("alerts/<int:rule_id>/delete", views.rule_delete, name="alert-delete"),
]
