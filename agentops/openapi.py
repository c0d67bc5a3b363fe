"""OpenAPI post-processing: the error answers every operation can give, documented once.

Views declare their success bodies; the failures come from shared machinery (DRF's exception
handler in ingest.api, the key throttle, the database-down handler), so they are added here to
every operation that does not already declare them. Without this the document promised only
200 while the API (correctly) answered 400/401/403/404/429/503, which schemathesis flags
(tests/security/test_schemathesis.py).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse

ERROR_SCHEMA = {
    "type": "object",
    "description": "`error` says what was wrong; a rejected form body names each field instead.",
    "properties": {"error": {"type": "string"}},
    "additionalProperties": True,
}
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.",
                               "schema": {"type": "integer"}}}
ERRORS = {
    "400": ("The request is malformed or a parameter is invalid; the message names it.", False),
    "401": ("Missing, unknown or revoked key.", False),
    "403": ("The key lacks the scope this operation needs.", False),
    "404": ("No such object in this project (or no such project).", False),
    "429": ("Over the key's rate limit: retry after Retry-After seconds.", True),
    "503": ("The database is unavailable: retry after Retry-After seconds.", True),
}


def add_error_responses(result, generator, request, public):
    """drf-spectacular postprocessing hook."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path in result.get("paths", {}).values():
        for method, operation in path.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            for status, (description, retry) in ERRORS.items():
                if status in responses:
                    continue
                response = {"description": description, "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
                if retry:
                    response["headers"] = RETRY_AFTER
                responses[status] = response
    return result


@login_required
def api_docs(request):
    """/api/docs: Swagger UI over /api/schema/, from static/vendor/swagger-ui/ (vendored from the
    drf-spectacular-sidecar wheel: no CDN). Its requests carry the session, so "Try it out" reads
    the signed-in user's projects."""
    return render(request, "api_docs.html", {"config": {"schema": reverse("schema")}})
