"""The login view, throttled so password guessing cannot continue. Two counters of failed
attempts, both in the shared cache (agentops/cache.py: every web process and machine counts
together), each refusing further attempts (429) for AGENTOPS_LOGIN_LOCKOUT_SECONDS, even with the
right password:

- per username: AGENTOPS_LOGIN_FAILURES failures for one account, from any address. The name is
  keyed as Django looks it up (NFKC, as AuthenticationForm's UsernameField and
  AbstractBaseUser.normalize_username do), then case-folded, so `ｂob` (fullwidth b), `BOB` or
  ` bob ` count, and are refused, as `bob`.
- per client: AGENTOPS_LOGIN_CLIENT_FAILURES failures from one client address, whatever the
  usernames, so one client cannot try many accounts without bound.

The client address is REMOTE_ADDR, unless AGENTOPS_TRUSTED_PROXY_HEADER names the header the
reverse proxy in front sets (e.g. X-Forwarded-For): then it is the address the proxy added, the
AGENTOPS_TRUSTED_PROXY_COUNT-th from the right of that header (anything to its left was sent by
the client and is ignored). Without the setting the header is ignored, so it cannot be forged.
IPv6 clients are counted per /64, the block one subscriber usually holds.

While the shared cache's Redis cannot be reached, signing in is refused (503 + Retry-After): the
lockout fails closed rather than count in each process's memory.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import unicodedata

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpResponseForbidden
from django.shortcuts import redirect
from django.urls import reverse

from agentops.cache import shared_counters_reachable

log = logging.getLogger("agentops")
COUNTER_RETRY_SECONDS = 5  # the embedded Redis is started again within a second or two (runstack)


def normalize_username(username: str) -> str:
    """The name as Django's auth looks it up (stripped, NFKC), then case-folded: one counter for
    every spelling that reaches the same account."""
    name = unicodedata.normalize("NFKC", username or "").strip()
    return unicodedata.normalize("NFKC", name.casefold())


def _parse_address(value: str) -> str | None:
    """A client address as a counting key (IPv6 reduced to its /64), or None if not an address."""
    value = value.strip().strip('"')
    if value.startswith("[") and "]" in value:  # "[2001:db8::1]:443"
        value = value[1:value.index("]")]
    elif value.count(":") == 1:  # "203.0.113.5:443"
        value = value.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if address.version == 6:
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def client_address(request) -> str:
    """The address to count a client's failures by: see the module docstring."""
    remote = request.META.get("REMOTE_ADDR", "") or ""
    fallback = _parse_address(remote) or remote
    header = (settings.AGENTOPS_TRUSTED_PROXY_HEADER or "").strip()
    if not header:
        return fallback
    meta_key = "HTTP_" + header.upper().replace("-", "_")
    hops = [hop for hop in (request.META.get(meta_key) or "").split(",") if hop.strip()]
    count = max(1, settings.AGENTOPS_TRUSTED_PROXY_COUNT)
    if len(hops) < count:
        # Not through every trusted proxy (or none): only the connection's own address is known.
        return fallback
    return _parse_address(hops[-count]) or fallback


def _digest(value: str) -> str:
    # Hashed: any name makes a short cache key of safe characters.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def _username_key(request) -> str:
    return f"login-failures:user:{_digest(normalize_username(request.POST.get('username', '')))}"


def _client_key(request) -> str:
    return f"login-failures:client:{_digest(client_address(request))}"


def _count_failure(key: str) -> None:
    timeout = settings.AGENTOPS_LOGIN_LOCKOUT_SECONDS
    cache.add(key, 0, timeout)
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout)


class ThrottledLoginView(auth_views.LoginView):
    redirect_authenticated_user = True

    def _locked_out(self) -> bool:
        request = self.request
        return (cache.get(_username_key(request), 0) >= settings.AGENTOPS_LOGIN_FAILURES
                or cache.get(_client_key(request), 0) >= settings.AGENTOPS_LOGIN_CLIENT_FAILURES)

    def post(self, request, *args, **kwargs):
        if not shared_counters_reachable():
            # Fails closed: counted in each process's memory instead, a guesser would get the
            # limit once per web process, and a restarted Redis would have forgotten nothing it
            # never saw.
            log.warning("login.refused_counter_unreachable")
            response = self.render_to_response(self.get_context_data(
                form=self.get_form_class()(request),
                locked_out="Signing in is paused: the failed-attempt counter cannot be reached. Try again in a moment."))
            response.status_code = 503
            response["Retry-After"] = str(COUNTER_RETRY_SECONDS)
            return response
        if self._locked_out():
            response = self.render_to_response(self.get_context_data(
                form=self.get_form_class()(request),
                locked_out="Too many failed attempts. Try again in a few minutes."))
            response.status_code = 429
            response["Retry-After"] = str(settings.AGENTOPS_LOGIN_LOCKOUT_SECONDS)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        _count_failure(_username_key(self.request))
        _count_failure(_client_key(self.request))
        return super().form_invalid(form)

    def form_valid(self, form):
        # The account's counter only: a client that knows one password must not be able to
        # clear its own count and go on guessing other accounts.
        cache.delete(_username_key(self.request))
        return super().form_valid(form)


def admin_login(request):
    """The admin's login is the site's one throttled login. A signed-in user the admin turned
    away (not staff) is told so: sending them to the login page, which sends a signed-in user
    straight back to ?next=/admin/, looped for ever."""
    if request.user.is_authenticated:
        return HttpResponseForbidden("Your account has no access to the admin: ask a superuser to make it staff.",
                                     content_type="text/plain")
    query = request.META.get("QUERY_STRING", "")
    return redirect(reverse("login") + (f"?{query}" if query else ""))
