"""Per-key rate limits: backpressure answered 429 with Retry-After, so senders slow down
instead of piling up requests. The window lives in each web process's memory (Django's
local-memory cache), so the effective limit is the configured rate per process; that keeps the
limiter free of any shared service that could itself fail under load."""

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
