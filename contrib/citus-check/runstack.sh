#!/usr/bin/env bash
# Step 1b: the whole product (web, Celery workers, beat) against the coordinator, niced.
set -euo pipefail
cd "$(dirname "$0")/../.."
source <(grep DATABASE_URL .data/citus-check/env)
export DATABASE_URL SECRET_KEY=${SECRET_KEY:-citus-check-secret-key} AGENTOPS_HTTPS=0
exec nice -n 10 .venv/bin/python manage.py runstack --port "${PORT:-18731}"
