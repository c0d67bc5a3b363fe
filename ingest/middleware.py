"""Database errors for every view (HTML pages included): a database that is down answers 503 +
Retry-After; a read that ran past its bound answers 503 saying so. And the bound itself: every
GET and HEAD runs its statements under AGENTOPS_READ_TIMEOUT_SECONDS."""

from collections.abc import Iterator

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse

from agentops.db import statement_timeout
from ingest.api import RETRY_AFTER_SECONDS, query_canceled, read_timeout_message


def database_error_response(exc: Exception) -> JsonResponse:
    if query_canceled(exc):
        return JsonResponse({"error": read_timeout_message()}, status=503)
    response = JsonResponse({"error": "database unavailable, retry later"}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, OperationalError | InterfaceError):
            return database_error_response(exception)
        return None


class ReadTimeoutMiddleware:
    """Every GET and HEAD (pages, chart JSON, the read API, exports as they stream) runs each of
    its statements under AGENTOPS_READ_TIMEOUT_SECONDS: one tenant's costly search cannot hold a
    web thread and a database backend for longer (docs/reliability.md). Writes are bounded by
    their bodies' size instead (ingest.limits); the MCP tools by their own bound."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        seconds = settings.AGENTOPS_READ_TIMEOUT_SECONDS
        try:
            with statement_timeout(seconds):
                response = self.get_response(request)
        except (OperationalError, InterfaceError) as exc:  # setting the bound failed: the database is down
            return database_error_response(exc)
        if response.streaming:  # an export reads as it is sent, after the view returned
            response.streaming_content = _bounded_while(response.streaming_content, seconds)
        return response


def _bounded_while(chunks: Iterator[bytes], seconds: float) -> Iterator[bytes]:
    with statement_timeout(seconds):
        yield from chunks
