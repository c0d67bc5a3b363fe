"""Turns a database that is down into 503 + Retry-After for every view (HTML pages included)."""

from django.db import InterfaceError, OperationalError
from django.http import JsonResponse

from ingest.api import RETRY_AFTER_SECONDS


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, OperationalError | InterfaceError):
            response = JsonResponse({"error": "database unavailable, retry later"}, status=503)
            response["Retry-After"] = str(RETRY_AFTER_SECONDS)
            return response
        return None
