from django.urls import path

from analysis.releases import api, views

urlpatterns = [
    path("api/v1/releases", api.ReleaseListView.as_view(), name="api-release-list"),
    path("api/v1/releases/compare", api.ReleaseCompareView.as_view(), name="api-release-compare"),
    path("releases", views.releases, name="releases"),
    path("releases/compare", views.release_compare_page, name="release-compare"),
]
