"""Django's cache on the Redis the product already runs, shared by every process.

Login lockouts, per-key ingest rate limits and cached release comparisons live in the cache; in
one process's memory, two gunicorn workers would allow twice the password guesses and twice the
rate. So the cache is Redis: the embedded one by default, or the server of CELERY_BROKER_URL, in a
database of its own (the broker's number + 1). A broker that is not Redis (RabbitMQ) leaves the
cache in each process's memory: the only case where limits are per process.

Redis going away must not take ingest with it: every cache call that cannot reach Redis falls
back to this process's memory for a while (the rate limits then hold per process), and says so
once in the log. The login lockout does not fall back: it fails closed (`shared_counters_reachable`,
agentops/login.py), since counts kept per process would let each process allow its own guesses.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit, urlunsplit

from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger("agentops.cache")

# How long a process keeps to its memory after Redis failed before it tries Redis again.
RETRY_SECONDS = 5.0
# A cache call waits at most this long for Redis: the cache must never be what stalls a request.
SOCKET_TIMEOUT_SECONDS = 0.5


def cache_url(broker_url: str) -> str | None:
    """The Redis URL of the cache for this broker (its own database), or None if not Redis."""
    parts = urlsplit(broker_url)
    if parts.scheme == "redis+socket":
        return f"unix://{parts.path}?db=1"
    if parts.scheme not in ("redis", "rediss"):
        return None
    try:
        db = int(parts.path.strip("/") or 0)
    except ValueError:
        db = 0
    return urlunsplit((parts.scheme, parts.netloc, f"/{(db + 1) % 16}", parts.query, ""))


def caches_setting(broker_url: str) -> dict:
    url = cache_url(broker_url)
    if url is None:
        return {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    return {"default": {
        "BACKEND": "agentops.cache.ResilientRedisCache",
        "LOCATION": url,
        "KEY_PREFIX": "agentops",
        "OPTIONS": {"socket_timeout": SOCKET_TIMEOUT_SECONDS,
                    "socket_connect_timeout": SOCKET_TIMEOUT_SECONDS},
    }}


def _fallible(name: str):
    def call(self, *args, **kwargs):
        if time.monotonic() >= self._redis_down_until:
            try:
                return getattr(super(ResilientRedisCache, self), name)(*args, **kwargs)
            except self._redis_errors as exc:
                self._redis_down_until = time.monotonic() + RETRY_SECONDS
                log.warning("cache.redis_unavailable falling back to process memory for %.0fs: %s",
                            RETRY_SECONDS, exc)
        return getattr(self._fallback, name)(*args, **kwargs)
    call.__name__ = name
    return call


class ResilientRedisCache(RedisCache):
    """RedisCache that serves from process memory while Redis cannot be reached."""

    def __init__(self, server, params):
        super().__init__(server, params)
        import redis

        self._redis_errors = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
        self._redis_down_until = 0.0
        self._fallback = LocMemCache("agentops-cache-fallback", {"TIMEOUT": params.get("TIMEOUT", 300)})


    def reachable(self) -> bool:
        """Whether Redis itself answers now (no fallback)."""
        try:
            RedisCache.has_key(self, "agentops:reachable")
        except self._redis_errors:
            return False
        return True


def shared_counters_reachable() -> bool:
    """Whether the counters every process shares can be read and written now. True where the
    cache is not Redis (a broker that is not Redis: per process by design, said above)."""
    from django.core.cache import caches

    backend = caches["default"]
    return backend.reachable() if isinstance(backend, ResilientRedisCache) else True


for _name in ("add", "get", "set", "touch", "delete", "get_many", "set_many", "delete_many", "has_key",
              "incr", "decr", "clear"):
    setattr(ResilientRedisCache, _name, _fallible(_name))
