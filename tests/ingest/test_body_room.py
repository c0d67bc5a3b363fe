"""A web process holds a bounded amount of request bodies at once, whatever gunicorn's thread
count: a request that finds no room waits a little, then is told 503 with Retry-After; a sender
that stops mid-body is told 408 and its thread freed (ingest/http.py)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import requests

from ingest import http, limits
from ingest.http import BodyError, request_body


class Request:
    """What request_body reads: META and read()."""

    def __init__(self, body: bytes = b"", *, read=None, **meta):
        self.META = {"CONTENT_LENGTH": str(len(body)), **meta}
        self._body = memoryview(body)
        self._read = read

    def read(self, n: int) -> bytes:
        if self._read is not None:
            return self._read(n)
        part, self._body = bytes(self._body[:n]), self._body[n:]
        return part


@pytest.fixture
def room(monkeypatch):
    """A room of 1,000 bytes, a short wait."""
    monkeypatch.setattr(limits, "MAX_BODY_BYTES_IN_FLIGHT", 1000)
    monkeypatch.setattr(limits, "BODY_ROOM_WAIT_SECONDS", 0.3)
    assert http._room._used == 0
    yield http._room
    assert http._room._used == 0, "a request kept its share"


def test_a_body_counts_while_it_is_handled_and_is_given_back_after(room):
    with request_body(Request(b"x" * 800)) as body:
        assert len(body) == 800 and room._used == 800
    assert room._used == 0


def test_a_request_that_finds_no_room_waits_then_gets_503_with_retry_after(room):
    with request_body(Request(b"x" * 800)):
        started = time.monotonic()
        with pytest.raises(BodyError) as refused, request_body(Request(b"y" * 300)):
            pass
        waited = time.monotonic() - started
    assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "1"}
    assert 0.3 <= waited < 1.5


def test_a_waiting_request_goes_on_once_room_is_given_back(room, monkeypatch):
    monkeypatch.setattr(limits, "BODY_ROOM_WAIT_SECONDS", 5)
    first = request_body(Request(b"x" * 800))
    first.__enter__()
    threading.Timer(0.3, first.__exit__, (None, None, None)).start()
    with request_body(Request(b"y" * 300)) as body:
        assert body == b"y" * 300


def test_a_body_larger_than_the_room_is_handled_alone(room):
    with request_body(Request(b"x" * 5000)) as body:
        assert len(body) == 5000 and room._used == 1000


def test_only_a_few_requests_wait_for_room_the_rest_are_refused_at_once(room, monkeypatch):
    monkeypatch.setattr(limits, "BODY_ROOM_WAIT_SECONDS", 2)
    monkeypatch.setattr(limits, "BODY_ROOM_WAITERS", 1)
    waiter_done = threading.Event()

    def wait_for_room():
        with pytest.raises(BodyError), request_body(Request(b"w" * 300)):
            pass
        waiter_done.set()

    with request_body(Request(b"x" * 1000)):
        waiter = threading.Thread(target=wait_for_room)
        waiter.start()
        time.sleep(0.2)  # the waiter is waiting
        started = time.monotonic()
        with pytest.raises(BodyError) as refused, request_body(Request(b"y" * 300)):
            pass
        assert refused.value.status == 503 and time.monotonic() - started < 1.0  # not the 2 s wait
        waiter.join(5)
    assert waiter_done.is_set()


def test_a_sender_silent_mid_body_gets_408_and_the_socket_is_left_as_it_was(room, monkeypatch):
    monkeypatch.setattr(limits, "BODY_IDLE_SECONDS", 0.3)
    server, client = socket.socketpair()
    try:
        client.sendall(b"x" * 100)  # of the 1,000 announced
        request = Request(read=server.recv, CONTENT_LENGTH="1000", **{"gunicorn.socket": server})
        with pytest.raises(BodyError) as silent, request_body(request):
            pass
        assert silent.value.status == 408 and "100 bytes" in silent.value.message
        assert server.gettimeout() is None
    finally:
        server.close()
        client.close()


def test_the_silence_is_408_through_djangos_request_too(room, monkeypatch):
    """Django's HttpRequest.read (what a view passes) wraps the socket's timeout in
    UnreadablePostError: still 408, not a 500."""
    from django.core.handlers.wsgi import WSGIRequest

    monkeypatch.setattr(limits, "BODY_IDLE_SECONDS", 0.3)
    server, client = socket.socketpair()
    try:
        client.sendall(b"x" * 100)
        request = WSGIRequest({"REQUEST_METHOD": "POST", "PATH_INFO": "/", "CONTENT_LENGTH": "1000",
                               "wsgi.input": server.makefile("rb"), "gunicorn.socket": server})
        with pytest.raises(BodyError) as silent, request_body(request):
            pass
        assert silent.value.status == 408
    finally:
        server.close()
        client.close()


def test_ingest_and_otlp_answer_503_with_retry_after_while_the_process_has_no_room(
        live_server, ingest_key, monkeypatch):
    monkeypatch.setattr(limits, "BODY_ROOM_WAIT_SECONDS", 0.1)
    headers = {"Authorization": f"Bearer {ingest_key}", "Content-Type": "application/json"}
    native = json.dumps({"events": [{"type": "task", "task_id": "t", "name": "n",
                                     "started_at": "2026-11-01T10:00:00Z"}]})
    otlp = json.dumps({"resourceSpans": []})
    held = http._Share()
    held.grow(limits.MAX_BODY_BYTES_IN_FLIGHT)  # another request's bodies fill the room
    try:
        busy = requests.post(f"{live_server.url}/api/v1/ingest", data=native, headers=headers, timeout=10)
        busy_otlp = requests.post(f"{live_server.url}/v1/traces", data=otlp, headers=headers, timeout=10)
    finally:
        held.release()
    assert (busy.status_code, busy.headers["Retry-After"]) == (503, "1") and "busy" in busy.json()["error"]
    assert (busy_otlp.status_code, busy_otlp.headers["Retry-After"]) == (503, "1")
    assert "busy" in busy_otlp.json()["message"]
    ok = requests.post(f"{live_server.url}/api/v1/ingest", data=native, headers=headers, timeout=10)
    assert ok.status_code == 200 and ok.json()["accepted"] == 1
