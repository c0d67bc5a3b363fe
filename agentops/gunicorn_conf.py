"""gunicorn's settings for the web service, the same for runstack, docker-compose and the fault
tests: `gunicorn -c python:agentops.gunicorn_conf agentops.wsgi:application --bind ... --workers N`.

gthread with WEB_THREADS (8) threads per worker: a new connection and one waiting for its next
request sit in the worker's poller and hold no thread (agentops/gunicorn_worker.py: stock gthread
gave a new connection a thread for up to 5 s), but one that has begun a request holds a thread until
its headers are in (gthread has no header timeout; a client trickling them holds it that long),
and a streamed export holds one until a slow reader has taken the last byte. With one thread, two
such clients stalled both workers (docs/reliability.md). Eight give short requests room beside
them; exports take at most AGENTOPS_MAX_EXPORTS_PER_PROCESS of them (analysis/dashboard/exports.py)
and ingest bodies in memory at once are bounded by bytes (ingest/http.py), so more threads mean
neither more export streams nor more memory. Many slow clients on a public address are a proxy's
job: docker-compose puts nginx in front (nginx.conf), which reads whole requests and buffers
responses, so gunicorn's threads only ever talk to a fast neighbour.

Each thread keeps its own database connection (CONN_MAX_AGE), so workers × threads is the web
tier's share of PostgreSQL's max_connections (100 by default): 4 × 8 in docker-compose.

The heartbeat comes from the main loop, not the request threads, so `timeout` never kills a
worker for an export that streams for minutes; it catches a wedged worker."""

import ctypes
import os


def _limit_malloc_arenas(arenas: int = 1) -> None:
    """glibc gives each thread that allocates its own malloc arena and seldom hands an arena's
    freed memory to another: with 8 threads taking turns at 16 MB batches a worker's RSS grew with
    every new thread (the flood fault test). Set here in the master, before any worker thread
    exists; the workers inherit it when forked. Elsewhere than glibc, nothing to do."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, arenas)  # -8: M_ARENA_MAX in malloc.h
    except (OSError, AttributeError):
        pass


_limit_malloc_arenas()

# gthread, with new connections polled until their request arrives (agentops/gunicorn_worker.py).
worker_class = "agentops.gunicorn_worker.ThreadWorker"
threads = int(os.environ.get("WEB_THREADS", "8"))
timeout = 60
graceful_timeout = 20  # in-flight requests finish on SIGTERM (runstack waits as long)
keepalive = 5  # seconds an idle kept-alive connection waits in the poller (no thread) for the next request
accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
