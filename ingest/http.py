"""Reading request bodies within the limits: Content-Length and the decompressed size are both
capped, so a gzip bomb is refused after MAX_BODY_BYTES, not after it filled memory."""

from __future__ import annotations

import zlib

from ingest import limits


class BodyError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def read_body(request, *, max_bytes: int | None = None) -> bytes:
    max_bytes = max_bytes or limits.MAX_BODY_BYTES
    length = request.META.get("CONTENT_LENGTH") or "0"
    try:
        declared = int(length)
    except ValueError:
        raise BodyError(400, "Content-Length: not a number") from None
    if declared > max_bytes:
        raise BodyError(413, f"body: {declared} bytes is over the limit of {max_bytes} bytes")
    raw = request.read(max_bytes + 1)
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
    return body
