"""Per-key rate limits: backpressure answered 429 with Retry-After, so senders slow down
instead of piling up requests. The window lives in Django's cache, shared by every web process
(agentops/cache.py), so the limit holds in total; while that Redis is unreachable each process
counts in its own memory instead of failing the request."""

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from ingest.models import IngestKey


class KeyRateThrottle(SimpleRateThrottle):
    scope = "key"

    def get_rate(self):
        return settings.AGENTOPS_KEY_RATE_LIMIT

    def get_cache_key(self, request, view):
        if isinstance(request.auth, IngestKey):
            return f"throttle:key:{request.auth.prefix}"
        return None
