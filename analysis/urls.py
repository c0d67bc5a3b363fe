from django.urls import include, path

from analysis import api, views

urlpatterns = [
    path("api/v1/tasks", api.TaskListView.as_view(), name="api-task-list"),
    path("api/v1/tasks/<str:task_id>", api.TaskDetailView.as_view(), name="api-task-detail"),
    path("", views.overview, name="overview"),
    path("", include("analysis.alerts.urls")),
]
