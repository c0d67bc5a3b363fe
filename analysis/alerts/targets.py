"""Where a webhook may point: a public address only, checked when the rule is saved and again at
every connection (the address connected to is the one checked, so DNS that changes its answer in
between gains nothing). Loopback, private, link-local (cloud metadata), multicast, reserved and
unspecified addresses are refused in every spelling the resolver accepts (decimal `2130706433`,
octal `0177.0.0.1`, `[::ffff:127.0.0.1]`, a name that resolves to one); redirects are not
followed. `AGENTOPS_WEBHOOK_ALLOWED_HOSTS` names on-prem receivers that may be private.

What a failed delivery records is a generic class (`refused target`, `timeout`, `connection
failed`, `HTTP 503`), never the target's own text: the delivery log is readable with a read key."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from django.conf import settings


class TargetRefused(OSError):
    """The URL's host is, or resolves to, an address webhooks may not reach."""


def _allowed_by_name(host: str) -> bool:
    return host.lower().strip("[]") in {h.lower().strip("[]") for h in settings.AGENTOPS_WEBHOOK_ALLOWED_HOSTS}


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None and not _public(str(embedded)):
            return False
    return ip.is_global and not ip.is_multicast


def _addresses(host: str, port: int) -> list[tuple]:
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetRefused(f"host {host!r} does not resolve") from exc


def _host_port(url: str) -> tuple[str, int]:
    """The URL's host and port; TargetRefused unless it is http(s) with a host and a valid port."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused("must be an http:// or https:// URL with a host")
    try:
        return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TargetRefused("port: not a number from 1 to 65535") from None


def check(url: str, *, unresolved_ok: bool = False) -> None:
    """Raise TargetRefused (saying why) unless the URL is http(s) to a host webhooks may reach.
    unresolved_ok: a name that does not resolve (yet, or not from here) passes; saving a rule
    uses it, and the delivery checks again."""
    host, port = _host_port(url)
    if _allowed_by_name(host):
        return
    try:
        found = _addresses(host, port)
    except TargetRefused:
        if unresolved_ok:
            return
        raise
    for *_, sockaddr in found:
        if not _public(sockaddr[0]):
            raise TargetRefused(f"{host} is a loopback, private or link-local address: "
                                "name it in AGENTOPS_WEBHOOK_ALLOWED_HOSTS to allow an on-prem receiver")


def _connect(host: str, port: int, timeout, source_address) -> socket.socket:
    """socket.create_connection to the first public address of host, checked as connected."""
    allowed = _allowed_by_name(host)
    last: OSError = TargetRefused(f"host {host!r} has no address")
    for family, kind, proto, _, sockaddr in _addresses(host, port):
        if not allowed and not _public(sockaddr[0]):
            raise TargetRefused(f"{host} resolves to a non-public address")
        sock = socket.socket(family, kind, proto)
        try:
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last


class _HTTPConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = _connect(self.host, self.port, self.timeout, self.source_address)


class _HTTPSConnection(http.client.HTTPSConnection):
    def connect(self):
        sock = _connect(self.host, self.port, self.timeout, self.source_address)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_HTTPSConnection, req, context=self._context)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a 3xx is the receiver's answer, reported as its status


# No proxies from the environment either: the checked address is the one connected to.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect, _HTTPHandler,
                                      _HTTPSHandler)


def post(url: str, *, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """POST and return the HTTP status; raises urllib.error.HTTPError for >= 300 and OSError.
    The addresses are checked once, by the connection, on the address it connects to."""
    _host_port(url)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with _opener.open(request, timeout=timeout) as response:
        return response.status


def error_class(exc: BaseException) -> str:
    """What the delivery log says of a failure: its kind, never the peer's own words."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, TargetRefused) or isinstance(exc, TargetRefused):
        return "refused target (not a public address)"
    if isinstance(reason, TimeoutError | socket.timeout):
        return "timeout"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, http.client.HTTPException) or isinstance(exc, http.client.HTTPException):
        return "invalid HTTP response"
    if isinstance(reason, socket.gaierror):
        return "host does not resolve"
    return "connection failed"
