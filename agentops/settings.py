"""agentops settings: one file, driven by environment variables.

With no DATABASE_URL / CELERY_BROKER_URL the embedded PostgreSQL and Redis start under
AGENTOPS_DATA_DIR (see agentops.embedded). DEBUG is off unless DEBUG=1 asks for it, in the
zero-setup default too (`make demo`, `runstack`): an error is a plain 500, never Django's debug
page with settings and local variables. A production deployment (DATABASE_URL set) must provide
SECRET_KEY.
"""

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def database_from_url(url: str) -> dict:
    """postgres://user:pass@host:port/name?host=/socket/dir&sslmode=... → Django DATABASES entry."""
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(f"DATABASE_URL must be a postgres:// URL, got scheme {parsed.scheme!r}")
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    host = query.pop("host", None) or unquote(parsed.hostname or "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": host,
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60),
        "CONN_HEALTH_CHECKS": True,
        # No JIT unless the URL says otherwise (`?options=...`): the product's statements run in
        # milliseconds, and on a PostgreSQL built with LLVM those whose estimate passes
        # jit_above_cost were compiled for ~650 ms each (the overview's critical path 43 → 720 ms;
        # docs/scaling.md, step 6). The embedded PostgreSQL has no JIT at all.
        "OPTIONS": {"options": "-c jit=off", **query},
    }


DATA_DIR = Path(env_str("AGENTOPS_DATA_DIR", str(BASE_DIR / ".data"))).resolve()
EMBEDDED_DATABASE = not env_str("DATABASE_URL")
EMBEDDED_BROKER = not env_str("CELERY_BROKER_URL")

if EMBEDDED_DATABASE:
    from agentops import embedded

    DATABASE_URL = embedded.postgres_url(DATA_DIR)
else:
    DATABASE_URL = env_str("DATABASE_URL")

if EMBEDDED_BROKER:
    from agentops import embedded

    CELERY_BROKER_URL = embedded.redis_url(DATA_DIR)
else:
    CELERY_BROKER_URL = env_str("CELERY_BROKER_URL")

# Shared by every process (login lockouts, ingest rate limits, cached comparisons): see
# agentops/cache.py. Redis (the broker's server, its own database) unless the broker is not Redis.
from agentops.cache import caches_setting  # noqa: E402

CACHES = caches_setting(CELERY_BROKER_URL)

PRODUCTION = not EMBEDDED_DATABASE
# Off unless asked (DEBUG=1): whitenoise serves /static/ either way (WHITENOISE_USE_FINDERS).
DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if PRODUCTION and not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DATABASE_URL points at a real server")
    SECRET_KEY = "agentops-insecure-development-key-only-for-the-embedded-default"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "agentops",
    "ingest",
    "analysis",
    "analysis.alerts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "agentops.security.SecurityHeadersMiddleware",
    "agentops.security.RejectNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "ingest.middleware.DatabaseUnavailableMiddleware",
    "ingest.middleware.ReadTimeoutMiddleware",
]

# Ingest reads bodies itself within ingest.limits; Django's own cap would answer 400 instead of 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = None

ROOT_URLCONF = "agentops.urls"
WSGI_APPLICATION = "agentops.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_from_url(DATABASE_URL)}
# Optional streaming read replica: dashboard and read-API GETs read traces and analysis results
# from it; writes, ingest, auth and every background job stay on the primary (agentops/db.py).
if env_str("DATABASE_REPLICA_URL"):
    DATABASES["replica"] = {**database_from_url(env_str("DATABASE_REPLICA_URL")), "TEST": {"MIRROR": "default"}}
    DATABASE_ROUTERS = ["agentops.db.ReplicaRouter"]
    MIDDLEWARE.append("agentops.db.ReplicaReadsMiddleware")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Whitenoise serves static files from gunicorn itself (no separate web server needed), straight
# from the app folders: no collectstatic step to forget.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

# HTTPS: on by default in production (DATABASE_URL set, DEBUG off), which assumes a TLS proxy in
# front that sets X-Forwarded-Proto. Set AGENTOPS_HTTPS=0 to serve plain HTTP (e.g. a private
# network, or docker-compose on :8000 without a proxy).
HTTPS = env_bool("AGENTOPS_HTTPS", PRODUCTION and not DEBUG)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", HTTPS)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "ingest.auth.IngestKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["ingest.throttling.KeyRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "ingest.api.exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "agentops API",
    "DESCRIPTION": "Ingest agent traces and read where their time went.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "agentops.openapi.add_error_responses"],
}

# Streamed exports (API and /tasks.csv, /findings.csv) one web process serves at once; the next
# is 503 + Retry-After. Each holds a thread until its client has read the last byte, so keep it
# well under gunicorn's threads (WEB_THREADS, 8): the others answer short requests.
AGENTOPS_MAX_EXPORTS_PER_PROCESS = env_int("AGENTOPS_MAX_EXPORTS_PER_PROCESS", 2)
# The longest one statement of a GET or HEAD (a page, chart JSON, the read API, an export's next
# rows) may run; past it PostgreSQL cancels it and the request answers 503 saying so. The product's
# reads take milliseconds at 10M steps (docs/scaling.md); this bounds what one tenant's costly
# search can hold of a web thread and a database backend, under gunicorn's 60 s worker timeout.
AGENTOPS_READ_TIMEOUT_SECONDS = env_int("AGENTOPS_READ_TIMEOUT_SECONDS", 15)
# Requests per key per web process ("N/second" or "N/minute"); 429 + Retry-After beyond it.
AGENTOPS_KEY_RATE_LIMIT = env_str("AGENTOPS_KEY_RATE_LIMIT", "300/second")
# Failed logins before the login form refuses for AGENTOPS_LOGIN_LOCKOUT_SECONDS: per username
# (normalised as Django's auth does, from any address), and per client address (any usernames).
AGENTOPS_LOGIN_FAILURES = env_int("AGENTOPS_LOGIN_FAILURES", 10)
AGENTOPS_LOGIN_CLIENT_FAILURES = env_int("AGENTOPS_LOGIN_CLIENT_FAILURES", 50)
AGENTOPS_LOGIN_LOCKOUT_SECONDS = env_int("AGENTOPS_LOGIN_LOCKOUT_SECONDS", 900)
# The client address for those limits: REMOTE_ADDR, unless a reverse proxy in front sets a header
# naming the client (e.g. "X-Forwarded-For"). Then the address counted is the one the proxy
# added: the AGENTOPS_TRUSTED_PROXY_COUNT-th from the right (1 proxy: the right-most). Set it only
# behind such a proxy: a client reaching agentops directly could otherwise forge the header.
AGENTOPS_TRUSTED_PROXY_HEADER = env_str("AGENTOPS_TRUSTED_PROXY_HEADER", "")
AGENTOPS_TRUSTED_PROXY_COUNT = env_int("AGENTOPS_TRUSTED_PROXY_COUNT", 1)

# Celery: the broker is Redis (embedded or CELERY_BROKER_URL) or RabbitMQ. No result backend:
# analysis results live in Postgres.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 600, "socket_timeout": 2, "socket_connect_timeout": 2}
CELERY_TASK_PUBLISH_RETRY = False
CELERY_TIMEZONE = "UTC"
CELERY_TASK_DEFAULT_QUEUE = env_str("AGENTOPS_QUEUE", "agentops")

# How long a task must stay quiet (no new step) after it ended before it is analysed.
ANALYSIS_QUIET_SECONDS = env_int("AGENTOPS_ANALYSIS_QUIET_SECONDS", 5)
# A task whose end was never reported (e.g. an OTLP root span that never came) is analysed
# after this much silence.
ANALYSIS_ABANDON_SECONDS = env_int("AGENTOPS_ANALYSIS_ABANDON_SECONDS", 120)

# Keep steps, samples and tasks this many days (0: keep everything). Old weekly partitions are
# dropped whole by the hourly maintenance job.
AGENTOPS_RETENTION_DAYS = env_int("AGENTOPS_RETENTION_DAYS", 0)

# Where people reach this dashboard: links in alert notifications point here.
AGENTOPS_BASE_URL = env_str("AGENTOPS_BASE_URL", "http://127.0.0.1:8000")

# Alert webhooks reach public addresses only (analysis/alerts/targets.py); these host names, as
# written in the URL, may also be loopback or private: on-prem receivers.
AGENTOPS_WEBHOOK_ALLOWED_HOSTS = env_list("AGENTOPS_WEBHOOK_ALLOWED_HOSTS", [])

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "agentops@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "pgserver": {"level": "WARNING"},
        "django.server": {"level": "WARNING"},
        # The MCP SDK logs every stateless exchange's session start and end at INFO.
        "mcp": {"level": "WARNING"},
    },
}
