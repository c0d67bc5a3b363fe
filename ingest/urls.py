from django.urls import path

from ingest.api import IngestView
from ingest.otlp_api import OtlpMetricsView, OtlpTracesView

urlpatterns = [
    path("api/v1/ingest", IngestView.as_view(), name="ingest"),
    path("v1/traces", OtlpTracesView.as_view(), name="otlp-traces"),
    path("v1/metrics", OtlpMetricsView.as_view(), name="otlp-metrics"),
]
