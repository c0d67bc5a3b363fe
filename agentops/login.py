"""The login view, throttled: after AGENTOPS_LOGIN_FAILURES failed attempts for one username
from one address, further attempts are refused (429) for AGENTOPS_LOGIN_LOCKOUT_SECONDS, even
with the right password, so guessing cannot continue."""

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache


def _cache_key(request) -> str:
    username = (request.POST.get("username") or "").strip().lower()[:150]
    return f"login-failures:{request.META.get('REMOTE_ADDR', '')}:{username}"


class ThrottledLoginView(auth_views.LoginView):
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        if cache.get(_cache_key(request), 0) >= settings.AGENTOPS_LOGIN_FAILURES:
            response = self.render_to_response(self.get_context_data(
                form=self.get_form_class()(request),
                locked_out="Too many failed attempts. Try again in a few minutes."))
            response.status_code = 429
            response["Retry-After"] = str(settings.AGENTOPS_LOGIN_LOCKOUT_SECONDS)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        key = _cache_key(self.request)
        cache.add(key, 0, settings.AGENTOPS_LOGIN_LOCKOUT_SECONDS)
        cache.incr(key)
        return super().form_invalid(form)

    def form_valid(self, form):
        cache.delete(_cache_key(self.request))
        return super().form_valid(form)
