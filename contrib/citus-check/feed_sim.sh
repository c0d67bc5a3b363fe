#!/usr/bin/env bash
# Step 2a: simulated traffic for sim-a and sim-b over HTTP (native batches to /api/v1/ingest,
# device telemetry included), the analysis left to the workers.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .data/citus-check/env
URL=http://127.0.0.1:${PORT:-18731}
export AGENTOPS_DATA_DIR=${AGENTOPS_DATA_DIR:-$PWD/.data}
nice -n 10 .venv/bin/python manage.py simulate --url "$URL" --key "$SIM_A_INGEST" --tasks 300 --seed 11 \
  --since 2d --releases v1,v2,v3 --batch-size 2000
nice -n 10 .venv/bin/python manage.py simulate --url "$URL" --key "$SIM_B_INGEST" --tasks 300 --seed 12 \
  --since 3d --releases r1,r2 --devices gpu:2,groq:1 --batch-size 2000
