"""Sending an alert event to one channel: webhooks (JSON POST, optionally signed) and email
(Django's email backend). `delivery.py` decides when: one attempt per delivery task, retried with
back-off there; this module only talks to the network and says what happened.

A webhook attempt has a WEBHOOK_TIMEOUT_SECONDS timeout; it is worth retrying after a network
error, a 5xx or a 429, not after another 4xx (the receiver said no, and will say it again) or a
refused target (analysis/alerts/targets.py).

Signature: with a `secret`, the request carries
`X-Agentops-Signature: sha256=<hex HMAC-SHA256 of the exact body bytes with the secret>`.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import time
import urllib.error
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.core.mail import send_mail

from analysis.alerts import targets
from analysis.alerts.metrics import unit
from analysis.alerts.models import AlertEvent
from analysis.units import fmt_value

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_SECONDS = 5.0
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
    retryable: bool = False  # a failure that another attempt may get past


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


def webhook_send(*, url: str, body: bytes, secret: str = "",
                 timeout: float = WEBHOOK_TIMEOUT_SECONDS) -> list[Attempt]:
    """POST the body once; accepted means a 2xx."""
    headers = {"Content-Type": "application/json", "User-Agent": "agentops-alerts"}
    if secret:
        headers[SIGNATURE_HEADER] = signature(secret, body)
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
    return [Attempt("webhook", url, 1, ok, status, error, (time.perf_counter() - started) * 1000,
                    datetime.now(tz=UTC), retryable=not ok and not refused and _retryable(status))]


def email_text(data: dict) -> tuple[str, str]:
    rule = data["rule"]
    verb = "FIRING" if data["state"] == "firing" else "RESOLVED"
    # A header holds one line: a CR/LF in the rule's name would make every message unsendable.
    subject = " ".join(f"[agentops] {verb}: {rule['name']}".split())
    measured_in = unit(rule["metric"], rule["baseline"])
    value = "no data" if data["value"] is None else fmt_value(data["value"], measured_in)
    op = ">" if rule["comparator"] == "gt" else "<"
    against = " vs baseline" if rule["baseline"] != "none" else ""
    body = (f"{rule['name']} is {data['state']} in project {rule['project']}.\n\n"
            f"{rule['metric']} over the last {rule['window_minutes']} min = {value}{against} "
            f"(alert when {op} {fmt_value(data['threshold'], measured_in)}), from {data['sample_count']} samples.\n\n"
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
    # A mail server that is down or refuses for now may take it later.
    return [Attempt("email", ", ".join(to), 1, ok, None, error,
                    (time.perf_counter() - started) * 1000, datetime.now(tz=UTC), retryable=not ok)]


def send_once(channel: dict, data: dict, body: bytes) -> list[Attempt]:
    """One attempt at one channel of the rule; a malformed stored channel is a failed attempt
    that is not worth retrying."""
    channel = channel if isinstance(channel, dict) else {}
    try:
        if channel.get("type") == "webhook":
            return webhook_send(url=channel["url"], body=body, secret=channel.get("secret") or "",
                                timeout=WEBHOOK_TIMEOUT_SECONDS)
        if channel.get("type") == "email":
            to = channel["to"] if isinstance(channel["to"], list) else [channel["to"]]
            return email_send(to=to, data=data)
        raise ValueError(f"unknown channel type {channel.get('type')!r}")
    except Exception as exc:
        target = str(channel.get("url") or channel.get("to") or "")[:200]  # never the secret
        return [Attempt(str(channel.get("type", "?"))[:20], target, 1, False, None,
                        f"{type(exc).__name__}: {exc}"[:500], 0.0, datetime.now(tz=UTC))]
