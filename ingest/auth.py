"""Authentication by project key: `Authorization: Bearer <key>`. The project always comes from
the key, never from the payload."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from ingest.models import IngestKey
from ingest.services import key_authenticate


class KeyUser:
    """The principal of a request authenticated by a project key."""

    is_authenticated = True
    is_active = True
    is_superuser = False
    is_staff = False
    is_anonymous = False

    def __init__(self, key: IngestKey):
        self.key = key
        self.project = key.project
        self.pk = None

    def __str__(self) -> str:
        return f"key:{self.key.prefix}"


def bearer_token(request) -> str | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class IngestKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        token = bearer_token(request)
        if token is None:
            return None
        key = key_authenticate(plaintext=token)
        if key is None:
            raise exceptions.AuthenticationFailed("unknown or revoked key")
        return KeyUser(key), key

    def authenticate_header(self, request):
        return 'Bearer realm="agentops"'


def has_scope(request, scope: str) -> bool:
    key = request.auth if isinstance(request.auth, IngestKey) else None
    return key is not None and scope in key.scopes


class HasIngestScope(permissions.BasePermission):
    message = "this key has no 'ingest' scope"

    def has_permission(self, request, view):
        return has_scope(request, IngestKey.SCOPE_INGEST)



class IngestKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Documents the bearer key in the OpenAPI schema."""

    target_class = "ingest.auth.IngestKeyAuthentication"
    name = "projectKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A project key: `ingest` scope to send, `read` to read, `admin` to manage."}
