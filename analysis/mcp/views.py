"""`/mcp`: the MCP server over Streamable HTTP. Authenticated and scoped exactly as the read API
(a project key with the `read` scope, or a logged-in session with CSRF; `analysis.access`), the
body read within its limit by ingest.http, then one exchange with the SDK (server.serve_http).
Stateless and JSON only: POST is the whole protocol here, GET (an SSE stream that would hold a
web thread open) and DELETE (no session to end) answer 405."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from analysis.access import request_project
from analysis.mcp import server
from ingest.http import BodyError, request_body

# What the SDK sees of the request: never the credentials (the view has used them).
_PRIVATE_HEADERS = {"authorization", "cookie"}
# What the answer keeps of the SDK's headers (Content-Length is the server's to set).
_DROPPED_HEADERS = {"content-length"}


class _AnyAccept(DefaultContentNegotiation):
    """The SDK answers what the client accepts; DRF's own answers (401, 403, 405) are JSON whatever
    the Accept header says, so a GET for an event stream learns 405, not 406."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


@extend_schema(exclude=True)  # the MCP tools describe themselves (tools/list), not the OpenAPI document
class McpView(APIView):
    content_negotiation_class = _AnyAccept

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        # Before the method: a key without `read` is 403 and another project 404, whatever it asks.
        self.project = request_project(request)

    def post(self, request):
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _PRIVATE_HEADERS]
        try:
            with request_body(request, max_bytes=server.MAX_BODY_BYTES) as body:
                answer = server.serve_http(project=self.project, method="POST", headers=headers, body=body)
        except BodyError as exc:
            return Response({"error": exc.message}, status=exc.status, headers=exc.headers)
        response = HttpResponse(answer.body, status=answer.status)
        for name, value in answer.headers:
            if name.lower() not in _DROPPED_HEADERS:
                response[name] = value
        return response
