from django.urls import path

from ingest.api import IngestView

urlpatterns = [
    path("api/v1/ingest", IngestView.as_view(), name="ingest"),
]
