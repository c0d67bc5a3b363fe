"""gunicorn's gthread worker, except that a new connection waits for its first bytes in the
worker's poller, not in a request thread.

gthread (gunicorn 23+) hands every accepted connection to a thread at once, and the thread waits
up to 5 s (`DEFAULT_WORKER_DATA_TIMEOUT`) for the request to arrive before giving the connection
back to the poller. Browsers open connections they do not use at once (Chromium preconnects, and
opens a socket per request in flight, then sends the request over whichever is ready first), so
a few such sockets held a worker's 8 threads, and the next real request on that worker queued
behind them for the rest of their 5 s: about 4 page loads in 100 took 5.6–6.1 s while the server
logged under 300 ms (issue #27.11; docs/reliability.md, "Page loads"). Here the poller watches a
new connection like a kept-alive one and a thread takes it only once bytes arrived; a silent
connection is closed after as long as gthread let it live (the data wait, then keepalive)."""

from __future__ import annotations

import errno
import selectors
import time
from functools import partial

from gunicorn.workers import gthread

# gthread's own bound on a silent new connection: the thread's data wait, then the poller's keepalive.
SILENT_CONNECTION_SECONDS = gthread.DEFAULT_WORKER_DATA_TIMEOUT


class ThreadWorker(gthread.ThreadWorker):
    def accept(self, listener):
        try:
            client_sock, client_addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = gthread.TConn(self.cfg, client_sock, client_addr, listener.getsockname())  # non-blocking
        # Every pending connection gets the same span, so pending_conns stays in timeout order
        # (murder_pending reads it from the front).
        conn.timeout = time.monotonic() + SILENT_CONNECTION_SECONDS + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(client_sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))
