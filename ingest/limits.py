"""Named limits enforced at the door. A violation answers 400/413 naming the field and the limit."""

from django.conf import settings


def _limit(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


MAX_BODY_BYTES = _limit("AGENTOPS_MAX_BODY_BYTES", 16 * 1024 * 1024)  # after decompression
# Bodies one web process holds at once, whatever its thread count (ingest/http.py): one
# maximum-size batch, parsed, is ~150 MB of a worker; smaller ones share the room. A request that
# finds no room waits up to BODY_ROOM_WAIT_SECONDS (at most BODY_ROOM_WAITERS at once), then 503.
MAX_BODY_BYTES_IN_FLIGHT = _limit("AGENTOPS_MAX_BODY_BYTES_IN_FLIGHT", MAX_BODY_BYTES)
BODY_ROOM_WAIT_SECONDS = 5
BODY_ROOM_WAITERS = 2
# A sender silent this long in the middle of its body is answered 408: its thread is freed.
BODY_IDLE_SECONDS = _limit("AGENTOPS_BODY_IDLE_SECONDS", 30)
MAX_EVENTS_PER_BATCH = _limit("AGENTOPS_MAX_EVENTS_PER_BATCH", 10_000)
MAX_ID_LENGTH = 128
MAX_NAME_LENGTH = 200
MAX_ATTRIBUTES = _limit("AGENTOPS_MAX_ATTRIBUTES", 256)
MAX_ATTRIBUTE_VALUE_CHARS = _limit("AGENTOPS_MAX_ATTRIBUTE_VALUE_CHARS", 16 * 1024)
MAX_ERROR_CHARS = 8 * 1024
MAX_JSON_DEPTH = 32
MAX_DEPENDS_ON = 256
# A tool result is kept for dependency evidence and display, not as an archive: its head is enough.
MAX_TOOL_RESULT_CHARS = _limit("AGENTOPS_MAX_TOOL_RESULT_CHARS", 4 * 1024)
# The tool calls one model response requested (tool-call ids on an LLM step).
MAX_TOOL_CALL_IDS = 256
TRUNCATION_MARKER = "…[truncated]"
# Numbers at the border (docs/otlp.md, "Numeric ranges"): a count fits the bigint it is stored in;
# a reading is finite and within ±MAX_READING, so a year of readings sums without overflowing a
# float8; the clock-event reasons mask is a whole number 0 <= v < 2**64, kept as its low
# CLOCK_REASONS_BITS bits (every bit DCGM defines is below 0x200; a float8 column holds integers
# exactly up to 2**53, and the rollups cast it to bigint).
INT64_MAX = 2**63 - 1
MAX_READING = 1e12
# A histogram's sum and bucket bounds (cumulative sums grow past any one reading).
MAX_HISTOGRAM_VALUE = 1e15
CLOCK_REASONS_BITS = 53
