"""Reading request bodies within the limits: Content-Length and the decompressed size are both
capped, so a gzip bomb is refused after MAX_BODY_BYTES, not after it filled memory.

A body sent with `Transfer-Encoding: chunked` has no Content-Length (the Node.js OTLP exporter
sends every request so). Django reads such a body as empty, which would answer 200 for data never
read; it is read here from the server's de-chunked input instead, under the same limit.

A web process holds at most MAX_BODY_BYTES_IN_FLIGHT bytes of bodies at once (read, decoded,
then parsed and stored by the view: a parsed JSON batch takes ~10× its text). Each request takes
its share as its bytes arrive, so a slow sender holds only what it has sent; one that finds no
room waits a little, then gets 503 + Retry-After. This bounds a worker's memory whatever its
thread count (gunicorn_conf.threads), and it is per process on purpose: it is that process's
memory it protects. A sender silent for BODY_IDLE_SECONDS mid-body gets 408 and frees its thread."""

from __future__ import annotations

import contextlib
import threading
import time
import zlib
from collections.abc import Iterator

from django.http import UnreadablePostError

from ingest import limits

_READ_SIZE = 64 * 1024


class BodyError(Exception):
    def __init__(self, status: int, message: str, *, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}


class _Room:
    """The bytes of bodies this process holds; `take` waits for room at most `wait` seconds, and
    only limits.BODY_ROOM_WAITERS requests wait at once (the rest are refused at once): waiting
    holds a thread, and threads are for short requests too."""

    def __init__(self):
        self._changed = threading.Condition()
        self._used = 0
        self._waiting = 0

    def take(self, n: int, *, wait: float) -> bool:
        with self._changed:
            if self._used + n <= limits.MAX_BODY_BYTES_IN_FLIGHT:
                self._used += n
                return True
            if wait <= 0 or self._waiting >= limits.BODY_ROOM_WAITERS:
                return False
            self._waiting += 1
            try:
                room = self._changed.wait_for(
                    lambda: self._used + n <= limits.MAX_BODY_BYTES_IN_FLIGHT, timeout=wait)
            finally:
                self._waiting -= 1
            if room:
                self._used += n
            return room

    def give(self, n: int) -> None:
        with self._changed:
            self._used -= n
            self._changed.notify_all()


_room = _Room()


class _Share:
    """One request's bytes in the room."""

    def __init__(self):
        self.held = 0

    def grow(self, total: int) -> None:
        want = min(total, limits.MAX_BODY_BYTES_IN_FLIGHT)  # alone, a request always fits
        if want <= self.held:
            return
        if _room.take(want - self.held, wait=0):
            self.held = want
            return
        # Never wait while holding: two requests each waiting for the other's bytes would both
        # time out. Give ours back and wait for the whole.
        self.release()
        if not _room.take(want, wait=limits.BODY_ROOM_WAIT_SECONDS):
            raise BodyError(503, "busy: this web process is holding as many request bodies as "
                                 "it may; retry after Retry-After seconds", retry_after=1)
        self.held = want

    def release(self) -> None:
        if self.held:
            _room.give(self.held)
            self.held = 0


@contextlib.contextmanager
def request_body(request, *, max_bytes: int | None = None) -> Iterator[bytes]:
    """The request's body (decoded, within the limits), counted against the process's room until
    the `with` block ends: parse and store it inside the block."""
    share = _Share()
    try:
        yield _read_body(request, max_bytes or limits.MAX_BODY_BYTES, share)
    finally:
        share.release()


def _read_body(request, max_bytes: int, share: _Share) -> bytes:
    raw = _read_raw(request, max_bytes, share)
    if len(raw) > max_bytes:
        raise BodyError(413, f"body: over the limit of {max_bytes} bytes")
    encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "deflate"):
        raise BodyError(415, f"Content-Encoding: {encoding!r} is not supported (use gzip)")
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    decoder = zlib.decompressobj(wbits)
    try:
        body = decoder.decompress(raw, max_bytes + 1)
    except zlib.error as exc:
        raise BodyError(400, f"body: not valid {encoding} data ({exc})") from None
    if len(body) > max_bytes or decoder.unconsumed_tail:
        raise BodyError(413, f"body: over the limit of {max_bytes} bytes after decompression")
    share.grow(len(raw) + len(body))
    if raw and not decoder.eof:
        raise BodyError(400, f"body: {encoding} data ends before its end marker (truncated)")
    return body


def _read_raw(request, max_bytes: int, share: _Share) -> bytes:
    """At most max_bytes + 1 bytes of the body as sent (before any Content-Encoding)."""
    meta = request.META
    length = meta.get("CONTENT_LENGTH") or ""
    if length:
        try:
            declared = int(length)
        except ValueError:
            raise BodyError(400, "Content-Length: not a number") from None
        if declared > max_bytes:
            raise BodyError(413, f"body: {declared} bytes is over the limit of {max_bytes} bytes")
        return _read_parts(request.read, min(declared, max_bytes + 1), share, meta)
    transfer = meta.get("HTTP_TRANSFER_ENCODING", "").strip().lower()
    if not transfer:
        return b""  # no Content-Length and no Transfer-Encoding: the body is empty (RFC 9112 6.3)
    if transfer.rsplit(",", 1)[-1].strip() != "chunked":
        raise BodyError(400, f"Transfer-Encoding: {transfer[:40]!r} is not supported "
                             "(send Content-Length, or end the codings with chunked)")
    stream = meta.get("wsgi.input")
    if stream is None or not meta.get("wsgi.input_terminated"):
        # A server that passes the chunk framing through (not gunicorn) cannot be read safely.
        raise BodyError(411, "Transfer-Encoding: chunked is not decoded by this server: "
                             "send Content-Length")
    return _read_parts(stream.read, max_bytes + 1, share, meta)


def _read_parts(read, most: int, share: _Share, meta) -> bytes:
    """Up to `most` bytes, counting each part against the room before reading it; a sender
    silent for BODY_IDLE_SECONDS is answered 408 (on gunicorn, whose socket is in the environ)."""
    sock = meta.get("gunicorn.socket")
    previous = sock.gettimeout() if sock is not None else None
    parts: list[bytes] = []
    size = 0
    started = time.monotonic()
    try:
        if sock is not None:
            sock.settimeout(limits.BODY_IDLE_SECONDS)
        while size < most:
            share.grow(size + min(_READ_SIZE, most - size))
            part = read(min(_READ_SIZE, most - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
    except (TimeoutError, UnreadablePostError) as exc:
        # Django's request.read wraps the socket's timeout in UnreadablePostError.
        if not isinstance(exc, TimeoutError) and not isinstance(exc.__cause__, TimeoutError):
            raise
        raise BodyError(408, f"body: nothing received for {limits.BODY_IDLE_SECONDS} s "
                             f"({size} bytes in {time.monotonic() - started:.0f} s)") from None
    finally:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.settimeout(previous)
    return b"".join(parts)
