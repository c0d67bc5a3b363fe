"""Delivering an alert event to its rule's channels: webhooks (JSON POST, optionally signed) and
email (Django's email backend).

A webhook gets WEBHOOK_ATTEMPTS tries with a timeout each and exponential backoff between them;
it is retried on a network error, a 5xx or a 429, not on another 4xx (the receiver said no, and
will say it again). Worst case per channel: 3 × 5 s + 1 s + 2 s = 18 s, well inside the minute
between evaluations. All deliveries of one evaluation run in parallel threads that only talk to
the network; the caller's thread writes the Delivery log, so a hanging endpoint never holds a
database connection or delays another rule's notification.

Signature: with a `secret`, the request carries
`X-Agentops-Signature: sha256=<hex HMAC-SHA256 of the exact body bytes with the secret>`.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.core.mail import send_mail

from analysis.alerts import targets
from analysis.alerts.models import AlertEvent, Delivery

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_SECONDS = 5.0
WEBHOOK_ATTEMPTS = 3
BACKOFF_SECONDS = 1.0  # then 2 s: doubled after each failed attempt
MAX_PARALLEL_DELIVERIES = 8
SIGNATURE_HEADER = "X-Agentops-Signature"


@dataclass(frozen=True)
class Attempt:
    channel: str
    target: str
    attempt: int
    ok: bool
    status_code: int | None
    error: str
    duration_ms: float
    at: datetime


def base_url() -> str:
    return settings.AGENTOPS_BASE_URL.rstrip("/")


def payload(event: AlertEvent) -> dict:
    """The JSON a webhook receives (documented in docs/alerts.md)."""
    rule = event.rule
    return {
        "event_id": event.pk,
        "state": event.state,
        "rule": {
            "id": rule.pk, "name": rule.name, "project": rule.project.name, "metric": rule.metric,
            "finding_kind": rule.finding_kind, "comparator": rule.comparator,
            "threshold": rule.threshold, "baseline": rule.baseline,
            "window_minutes": rule.window_minutes, "for_minutes": rule.for_minutes,
            "filters": rule.filters,
        },
        "value": event.value,
        "baseline_value": event.baseline_value,
        "threshold": event.threshold,
        "sample_count": event.sample_count,
        "window": {"minutes": rule.window_minutes, "start": event.window_start.isoformat(),
                   "end": event.window_end.isoformat()},
        "link": base_url() + event.link,
        "at": event.at.isoformat(),
    }


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _retryable(status: int | None) -> bool:
    return status is None or status >= 500 or status == 429


def webhook_send(*, url: str, body: bytes, secret: str = "", attempts: int = WEBHOOK_ATTEMPTS,
                 timeout: float = WEBHOOK_TIMEOUT_SECONDS, backoff: float = BACKOFF_SECONDS) -> list[Attempt]:
    """POST the body until it is accepted (2xx) or the attempts run out."""
    headers = {"Content-Type": "application/json", "User-Agent": "agentops-alerts"}
    if secret:
        headers[SIGNATURE_HEADER] = signature(secret, body)
    out: list[Attempt] = []
    for n in range(1, attempts + 1):
        started = time.perf_counter()
        status, error, refused = None, "", False
        try:
            status = targets.post(url, body=body, headers=headers, timeout=timeout)
        except urllib.error.HTTPError as exc:
            status, error = exc.code, targets.error_class(exc)
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            error = targets.error_class(exc)
            refused = isinstance(getattr(exc, "reason", exc), targets.TargetRefused)
        ok = status is not None and 200 <= status < 300
        out.append(Attempt("webhook", url, n, ok, status, error,
                           (time.perf_counter() - started) * 1000, datetime.now(tz=UTC)))
        if ok or refused or not _retryable(status) or n == attempts:
            break
        time.sleep(backoff * 2 ** (n - 1))
    return out


def email_text(data: dict) -> tuple[str, str]:
    rule = data["rule"]
    verb = "FIRING" if data["state"] == "firing" else "RESOLVED"
    # A header holds one line: a CR/LF in the rule's name would make every message unsendable.
    subject = " ".join(f"[agentops] {verb}: {rule['name']}".split())
    value = "no data" if data["value"] is None else f"{data['value']:.4g}"
    op = ">" if rule["comparator"] == "gt" else "<"
    unit = " (% change vs baseline)" if rule["baseline"] != "none" else ""
    body = (f"{rule['name']} is {data['state']} in project {rule['project']}.\n\n"
            f"{rule['metric']} over the last {rule['window_minutes']} min = {value}{unit} "
            f"(alert when {op} {data['threshold']:g}), from {data['sample_count']} samples.\n\n"
            f"Matching tasks: {data['link']}\n")
    return subject, body


def email_send(*, to: list[str], data: dict) -> list[Attempt]:
    started = time.perf_counter()
    subject, body = email_text(data)
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, to, fail_silently=False)
        ok, error = True, ""
    except Exception as exc:  # any backend failure (SMTP, DNS, auth) is logged, not raised
        ok, error = False, f"{type(exc).__name__}: {exc}"[:500]
    return [Attempt("email", ", ".join(to), 1, ok, None, error,
                    (time.perf_counter() - started) * 1000, datetime.now(tz=UTC))]


def _job(channel: dict, data: dict, body: bytes) -> list[Attempt]:
    try:
        return _send(channel, data, body)
    except Exception as exc:  # a malformed stored channel is logged as a failed delivery
        target = str(channel.get("url") or channel.get("to") or "")[:200]  # never the secret
        return [Attempt(str(channel.get("type", "?"))[:20], target, 1, False, None,
                        f"{type(exc).__name__}: {exc}"[:500], 0.0, datetime.now(tz=UTC))]


def _send(channel: dict, data: dict, body: bytes) -> list[Attempt]:
    if channel.get("type") == "webhook":
        return webhook_send(url=channel["url"], body=body, secret=channel.get("secret") or "",
                            attempts=WEBHOOK_ATTEMPTS, timeout=WEBHOOK_TIMEOUT_SECONDS,
                            backoff=BACKOFF_SECONDS)
    if channel.get("type") == "email":
        to = channel["to"] if isinstance(channel["to"], list) else [channel["to"]]
        return email_send(to=to, data=data)
    return []


def deliver_all(events: list[AlertEvent]) -> list[Delivery]:
    """Send every event to every channel of its rule in parallel and log each attempt."""
    jobs = []
    for event in events:
        data = payload(event)
        body = json.dumps(data, sort_keys=True).encode()
        for channel in event.rule.channels or []:
            jobs.append((event, channel, data, body))
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_DELIVERIES, len(jobs))) as pool:
        futures = [(event, pool.submit(_job, channel, data, body)) for event, channel, data, body in jobs]
        rows = [Delivery(event=event, channel=a.channel, target=a.target, attempt=a.attempt, ok=a.ok,
                         status_code=a.status_code, error=a.error, duration_ms=a.duration_ms, at=a.at)
                for event, future in futures for a in future.result()]
    Delivery.objects.bulk_create(rows)
    for row in rows:
        level = logging.INFO if row.ok else logging.WARNING
        log.log(level, "alerts.delivered event=%s %s %s attempt=%s ok=%s %s", row.event_id, row.channel,
                row.target, row.attempt, row.ok, row.status_code or row.error)
    return rows
