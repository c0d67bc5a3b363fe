from django.urls import include, path

from analysis import api, views

urlpatterns = [
    path("api/v1/tasks", api.TaskListView.as_view(), name="api-task-list"),
    path("api/v1/tasks/<str:task_id>", api.TaskDetailView.as_view(), name="api-task-detail"),
    path("api/v1/findings", api.FindingListView.as_view(), name="api-finding-list"),
    path("api/v1/latency", api.LatencyView.as_view(), name="api-latency"),
    path("api/v1/export/<str:entity>", api.ExportView.as_view(), name="api-export"),
    path("", views.overview, name="overview"),
    path("charts/overview.json", views.overview_charts, name="overview-charts"),
    path("tasks", views.task_list, name="tasks"),
    path("tasks.csv", views.tasks_csv, name="tasks-csv"),
    path("findings.csv", views.findings_csv, name="findings-csv"),
    path("tasks/<str:task_id>", views.task_detail, name="task-detail"),
    path("tasks/<str:task_id>/waterfall.json", views.task_waterfall, name="task-waterfall"),
    path("tasks/<str:task_id>/steps/<str:step_id>.json", views.step_detail, name="step-detail"),
    path("latency", views.latency, name="latency"),
    path("charts/latency.json", views.latency_charts, name="latency-charts"),
    path("devices", views.devices, name="devices"),
    path("charts/devices.json", views.devices_charts, name="devices-charts"),
    path("", include("analysis.alerts.urls")),
    path("", include("analysis.releases.urls")),
]
