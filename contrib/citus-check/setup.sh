#!/usr/bin/env bash
# Step 1 of the Citus browser check (contrib/citus-check/README.md): on a running `make citus`
# cluster, turn on the coordinator's statement logging, create 4 projects so that 2 land on each
# worker, their keys, a superuser and a plain member of one project. Writes .data/citus-check/env.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
URL=$($PY -m agentops.citus url)
OUT=.data/citus-check; mkdir -p "$OUT"
export DATABASE_URL=$URL SECRET_KEY=${SECRET_KEY:-citus-check-secret-key} DEBUG=1 AGENTOPS_HTTPS=0
q() { psql "$URL" -Atc "$1"; }

# Every statement with its time, backend pid and application; every statement Citus splits into
# more than one task (shard) logged as "multi-task query about to be executed" with its text.
q "ALTER SYSTEM SET citus.multi_task_query_log_level = 'log'" >/dev/null
q "ALTER SYSTEM SET log_min_error_statement = 'log'" >/dev/null
q "ALTER SYSTEM SET log_line_prefix = '%m [%p] %a '" >/dev/null
q "ALTER SYSTEM SET log_min_duration_statement = 0" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null

worker_of() {  # the port of the worker holding project $1's shard
  q "SELECT nodeport FROM citus_shards WHERE table_name = 'ingest_task'::regclass
     AND shardid = get_shard_id_for_distribution_column('ingest_task', $1)"
}
declare -A per_worker=()
: > "$OUT/env"
for name in sim-a sim-b corpus-a recorded; do
  # the next id whose shard is on a worker that holds fewer than 2 of our projects
  next=$(q "SELECT last_value + CASE WHEN is_called THEN 1 ELSE 0 END FROM ingest_project_id_seq")
  while [ "${per_worker[$(worker_of "$next")]:-0}" -ge 2 ]; do next=$((next + 1)); done
  q "SELECT setval('ingest_project_id_seq', $next, false)" >/dev/null
  key=$(nice -n 10 $PY manage.py create_project "$name" | tail -1)
  id=$(q "SELECT id FROM ingest_project WHERE name = '$name'")
  port=$(worker_of "$id")
  per_worker[$port]=$(( ${per_worker[$port]:-0} + 1 ))
  read_key=$(nice -n 10 $PY manage.py create_key "$name" --scope read --name browser-check | tail -1)
  var=$(echo "$name" | tr a-z- A-Z_)
  printf '%s_ID=%s\n%s_WORKER=%s\n%s_INGEST=%s\n%s_READ=%s\n' "$var" "$id" "$var" "$port" "$var" "$key" "$var" "$read_key" >> "$OUT/env"
  echo "project $name id $id on worker port $port"
done
nice -n 10 $PY manage.py shell -c "
from django.contrib.auth import get_user_model
U = get_user_model()
U.objects.filter(username='root').exists() or U.objects.create_superuser('root', 'root@example.com', 'root-pw-123')
U.objects.filter(username='member').exists() or U.objects.create_user('member', 'member@example.com', 'member-pw-123')
"
nice -n 10 $PY manage.py add_member sim-a member
echo "DATABASE_URL=$URL" >> "$OUT/env"
