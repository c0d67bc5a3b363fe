"""Security headers on every response: a Content-Security-Policy and the cross-origin isolation
headers Django's SecurityMiddleware does not set.

The policy allows only what the pages use: scripts and styles from this origin (`static/js/*.js`
and the vendored Plotly; no CDN), `fetch` of chart JSON from this origin, images from this
origin plus `data:` (Plotly's toolbar icons and PNG export are data URLs). Plotly draws with SVG
and sets element style attributes and a generated <style> rule sheet at run time, so
`style-src` must allow 'unsafe-inline'; it never needs 'unsafe-eval' for the trace types the
dashboard uses (verified by tests/browser/test_csp.py, which fails on any CSP
violation). Scripts stay strict: no inline script, no eval, so an injected `<script>` or
`onerror=` in trace content cannot run even if escaping were ever missed.
"""

from __future__ import annotations

from django.http import JsonResponse

CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])

HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    # The dashboard uses no device features; deny them to anything that manages to run.
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), usb=(), payment=(), "
                          "interest-cohort=()",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}


class SecurityHeadersMiddleware:
    """Adds HEADERS to every response that does not set them itself."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        for name, value in HEADERS.items():
            if name not in response:
                response[name] = value
        return response


class RejectNulMiddleware:
    """400 for a URL whose path or query string holds a NUL byte (%00). PostgreSQL text cannot
    store NUL, so such a value reaching any lookup (a project name, a task id, a filter) was a
    500 on every page and API; it is refused here once for all of them."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or any("\x00" in k or "\x00" in v
                                          for k, values in request.GET.lists() for v in values):
            return JsonResponse({"error": "URL: NUL bytes (%00) are not allowed"}, status=400)
        return self.get_response(request)
