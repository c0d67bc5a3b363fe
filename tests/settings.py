"""Test settings: the product's settings, with a Celery queue of this run's own so a running
`make demo` (or another test run) never consumes the tests' messages."""

import os

os.environ.setdefault("AGENTOPS_TEST_RUN", str(os.getpid()))

from agentops.settings import *  # noqa: E402,F403

CELERY_TASK_DEFAULT_QUEUE = f"agentops-test-{os.environ['AGENTOPS_TEST_RUN']}"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# The cache is the product's shared Redis: this run's keys get a prefix of their own, so
# concurrent runs (and a running demo) never see each other's lockouts or rate windows.
CACHES["default"]["KEY_PREFIX"] = f"test-{os.environ['AGENTOPS_TEST_RUN']}"  # noqa: F405
# The tests' webhook receivers listen on loopback, as an on-prem receiver would be allowed to;
# tests/alerts/test_ssrf.py empties this to check the refusals.
AGENTOPS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
# A test's own stack shortens the time a sender may stall mid-body (ingest/limits.py reads it here).
AGENTOPS_BODY_IDLE_SECONDS = int(os.environ.get("AGENTOPS_BODY_IDLE_SECONDS", "30"))
