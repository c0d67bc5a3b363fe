"""The cache every process shares (agentops/cache.py): on the broker's Redis in a database of its
own, and still answering from process memory when Redis cannot be reached."""

from __future__ import annotations

import logging

from agentops.cache import ResilientRedisCache, cache_url, caches_setting


def test_the_cache_lives_in_its_own_database_of_the_brokers_redis():
    assert cache_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/1"
    assert cache_url("redis+socket:///data/redis.sock") == "unix:///data/redis.sock?db=1"
    assert cache_url("rediss://user:pw@cache.internal:6380") == "rediss://user:pw@cache.internal:6380/1"
    # A RabbitMQ broker leaves no Redis to share: each process keeps its own memory.
    assert cache_url("amqp://guest@rabbit//") is None
    assert caches_setting("amqp://guest@rabbit//")["default"]["BACKEND"].endswith("LocMemCache")


def test_with_redis_unreachable_the_cache_still_counts_in_memory(caplog):
    # Nothing listens on port 9 (discard): every Redis call fails at once.
    cache = ResilientRedisCache("redis://127.0.0.1:9/1", {"OPTIONS": {"socket_connect_timeout": 0.2}})
    with caplog.at_level(logging.WARNING, logger="agentops.cache"):
        assert cache.add("login-failures:bob", 0, 60)
        assert cache.incr("login-failures:bob") == 1
        assert cache.incr("login-failures:bob") == 2
        assert cache.get("login-failures:bob") == 2
    assert "cache.redis_unavailable" in caplog.text
    assert caplog.text.count("cache.redis_unavailable") == 1  # said once, not per call
