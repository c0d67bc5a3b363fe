from django.urls import include, path, register_converter

from analysis.dashboard import (
    agents,
    api,
    compare_api,
    compare_views,
    device_views,
    instrumentation_views,
    views,
)
from analysis.mcp.views import McpView
from ingest.ids import IdConverter

register_converter(IdConverter, "id")

urlpatterns = [
    path("api/v1/tasks", api.TaskListView.as_view(), name="api-task-list"),
    path("api/v1/tasks/<id:task_id>", api.TaskDetailView.as_view(), name="api-task-detail"),
    path("api/v1/tasks/<id:task_id>/diff", compare_api.TaskDiffView.as_view(), name="api-task-diff"),
    path("api/v1/search/values", api.SearchValuesView.as_view(), name="api-search-values"),
    path("api/v1/sessions", compare_api.SessionListView.as_view(), name="api-session-list"),
    path("api/v1/sessions/<id:session_id>", compare_api.SessionDetailView.as_view(), name="api-session-detail"),
    path("api/v1/findings", api.FindingListView.as_view(), name="api-finding-list"),
    path("api/v1/latency", api.LatencyView.as_view(), name="api-latency"),
    path("api/v1/status", api.StatusView.as_view(), name="api-status"),
    path("api/v1/agents/<id:name>", agents.AgentDetailView.as_view(), name="api-agent-detail"),
    path("api/v1/instrumentation", instrumentation_views.InstrumentationView.as_view(), name="api-instrumentation"),
    path("api/v1/export/<str:entity>", api.ExportView.as_view(), name="api-export"),
    path("mcp", McpView.as_view(), name="mcp"),
    path("", views.overview, name="overview"),
    path("charts/overview.json", views.overview_charts, name="overview-charts"),
    path("charts/overview-cost.json", views.overview_cost, name="overview-cost"),
    path("tasks", views.task_list, name="tasks"),
    path("tasks.csv", views.tasks_csv, name="tasks-csv"),
    path("findings.csv", views.findings_csv, name="findings-csv"),
    path("tasks/<id:task_id>", views.task_detail, name="task-detail"),
    path("tasks/<id:task_id>/waterfall.json", views.task_waterfall, name="task-waterfall"),
    path("tasks/<id:task_id>/steps/<id:step_id>.json", views.step_detail, name="step-detail"),
    path("tasks/<id:task_id>/compare", compare_views.task_compare, name="task-compare"),
    path("tasks/<id:task_id>/compare.json", compare_views.task_compare_json, name="task-compare-json"),
    path("tasks/<id:task_id>/live.json", compare_views.task_live, name="task-live"),
    path("tasks/<id:task_id>/search.json", compare_views.task_step_search, name="task-step-search"),
    path("compare", compare_views.compare_pick, name="compare"),
    path("charts/turn-time.json", compare_views.turn_time_json, name="turn-time"),
    path("sessions", compare_views.session_list, name="sessions"),
    path("sessions/<id:session_id>", compare_views.session_detail, name="session-detail"),
    path("latency", views.latency, name="latency"),
    path("charts/latency.json", views.latency_charts, name="latency-charts"),
    path("agents/<id:name>", agents.agent_detail, name="agent-detail"),
    path("devices", device_views.devices_page, name="devices"),
    path("instrumentation", instrumentation_views.instrumentation_page, name="instrumentation"),
    path("charts/devices.json", device_views.devices_charts, name="devices-charts"),
    path("", include("analysis.alerts.urls")),
    path("", include("analysis.releases.urls")),
    path("", include("analysis.settings.urls")),
]
