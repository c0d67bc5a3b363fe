"""Site-wide error pages: API paths answer JSON, like the API's own errors, so an API client
(and the OpenAPI document) never meets an HTML page for a URL that does not route, e.g.
`/api/v1/alerts/rules/-1`. Pages keep Django's HTML."""

from __future__ import annotations

from django.http import JsonResponse
from django.views import defaults

API_PREFIXES = ("/api/", "/v1/")


def not_found(request, exception=None):
    if request.path.startswith(API_PREFIXES):
        return JsonResponse({"error": "not found"}, status=404)
    return defaults.page_not_found(request, exception)
