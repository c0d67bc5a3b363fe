from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from agentops.login import ThrottledLoginView, admin_login
from agentops.openapi import api_docs

urlpatterns = [
    path("login/", ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # One throttled login for the whole site, the admin included.
    path("admin/login/", admin_login),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs", api_docs, name="api-docs"),
    path("", include("ingest.urls")),
    path("", include("analysis.urls")),
]

handler404 = "agentops.errors.not_found"
