"""At most AGENTOPS_MAX_EXPORTS_PER_PROCESS streamed exports at once in one web process; the next
is answered 503 with Retry-After (docs/export.md).

A streamed export holds one of its process's gunicorn threads until the client has read the last
byte, minutes for a slow reader; without a cap a few slow downloads took every thread and the
process stopped answering even /login/. The count is per process on purpose, not in the shared
cache: what it protects is this process's threads."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from django.conf import settings

RETRY_AFTER_SECONDS = 10

_lock = threading.RLock()  # re-entrant: a collected response may give its slot back inside take()
_in_use = 0


class Busy(Exception):
    """Every export slot of this process is taken."""

    message = "busy: this web process is serving as many exports as it may; retry after Retry-After seconds"
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}


class Slot:
    """One export's slot: `stream(chunks)` hands it to the response body, which gives it back when
    it ends, fails or is closed (the WSGI server closes every response, read to the end or not);
    leaving the `with` block without streaming gives it back at once."""

    def __init__(self):
        self._held = True
        self._streaming = False

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or not self._streaming:
            self.release()

    def stream(self, chunks: Iterable) -> Iterator:
        self._streaming = True
        return _Held(self, chunks)

    def release(self) -> None:
        global _in_use
        with _lock:
            if self._held:
                self._held = False
                _in_use -= 1


class _Held:
    def __init__(self, slot: Slot, chunks: Iterable):
        self._slot, self._chunks = slot, iter(chunks)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self._chunks)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._slot.release()
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()

    # A response dropped unclosed (a test client's, never read to the end) gives it back too.
    __del__ = close


def take() -> Slot:
    """A slot, or Busy when this process already serves as many exports as it may."""
    global _in_use
    with _lock:
        if _in_use >= settings.AGENTOPS_MAX_EXPORTS_PER_PROCESS:
            raise Busy()
        _in_use += 1
    return Slot()
