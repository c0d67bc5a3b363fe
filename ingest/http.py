"""Reading request bodies within the limits: Content-Length and the decompressed size are both
capped, so a gzip bomb is refused after MAX_BODY_BYTES, not after it filled memory.

A body sent with `Transfer-Encoding: chunked` has no Content-Length (the Node.js OTLP exporter
sends every request so). Django reads such a body as empty, which would answer 200 for data never
read; it is read here from the server's de-chunked input instead, under the same limit."""

from __future__ import annotations

import zlib

from ingest import limits

_READ_SIZE = 64 * 1024


class BodyError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def read_body(request, *, max_bytes: int | None = None) -> bytes:
    max_bytes = max_bytes or limits.MAX_BODY_BYTES
    raw = _read_raw(request, max_bytes)
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
    if raw and not decoder.eof:
        raise BodyError(400, f"body: {encoding} data ends before its end marker (truncated)")
    return body


def _read_raw(request, max_bytes: int) -> bytes:
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
        return request.read(max_bytes + 1)
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
    parts: list[bytes] = []
    size = 0
    while size <= max_bytes:
        part = stream.read(min(_READ_SIZE, max_bytes + 1 - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)
