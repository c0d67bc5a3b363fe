"""Where a simulated workload goes: into a project in-process, or to a server over HTTP.

Both send the same native events through the same parser (`ingest.events.parse_event`), so a
workload stored either way is the same data: in-process is simply the API without the
network. Over HTTP, 429 and 503 are answered with Retry-After and retried, as any well-behaved
sender must.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable

from ingest.events import parse_event
from ingest.models import Project
from ingest.records import Batch, RecordError
from ingest.services import batch_store

Progress = Callable[[int], None]
MAX_RETRIES = 8
MAX_RETRY_WAIT_S = 30.0


class SinkError(Exception):
    """The destination refused the data; the message says what it answered."""


def store_in_process(*, project: Project, batches: Iterable[list[dict]], progress: Progress) -> int:
    """Parse and store each batch; returns how many events were rejected (0 when all is well)."""
    rejected = 0
    for events in batches:
        batch = Batch()
        for event in events:
            try:
                record = parse_event(event)
            except RecordError:
                rejected += 1
                continue
            batch.add(record)
        if len(batch):
            batch_store(project=project, batch=batch)
        progress(len(events))
    return rejected


def post_http(*, url: str, key: str, batches: Iterable[list[dict]], progress: Progress,
              sleep: Callable[[float], None] = time.sleep) -> int:
    """POST each batch to `{url}/api/v1/ingest`; returns how many events the server rejected."""
    import requests

    endpoint = url.rstrip("/") + "/api/v1/ingest"
    session = requests.Session()
    session.headers.update({"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    rejected = 0
    for events in batches:
        body = json.dumps({"events": events}, separators=(",", ":")).encode()
        for attempt in range(MAX_RETRIES + 1):
            try:
                response = session.post(endpoint, data=body, timeout=120)
            except requests.ConnectionError as exc:
                if attempt == MAX_RETRIES:
                    raise SinkError(f"{endpoint}: cannot connect ({exc})") from exc
                sleep(min(2.0 ** attempt, MAX_RETRY_WAIT_S))
                continue
            if response.status_code in (429, 503) and attempt < MAX_RETRIES:
                sleep(_retry_after(response.headers.get("Retry-After"), attempt))
                continue
            if response.status_code != 200:
                raise SinkError(f"{endpoint} answered {response.status_code}: {response.text[:300]}")
            rejected += len(response.json().get("rejected", []))
            break
        progress(len(events))
    return rejected


def _retry_after(header: str | None, attempt: int) -> float:
    try:
        return min(max(float(header), 0.0), MAX_RETRY_WAIT_S)
    except (TypeError, ValueError):
        return min(2.0 ** attempt, MAX_RETRY_WAIT_S)
