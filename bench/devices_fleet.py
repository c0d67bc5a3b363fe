"""The query dataset's inference fleet, for the servers and devices page: the loader's six devices
become servers on hosts of their own with their GPUs (4 per GPU host, a card per d-Matrix or Groq
host: 18 devices), telemetry every `every_s` seconds over the dataset's span as dcgm-exporter and
vLLM send it (1.55M samples at 30 s over 30 days), hardware findings in bursts (calls of 50
consecutive tasks in every 2,000: incidents, as real queue floods and throttling come), and
vLLM request spans under the LLM calls of the last day (the framework step after each call
becomes its server span). Added once, in place, without changing the step count that decides a
reload (docs/scaling.md, "Servers and devices at 10M steps"). Its joins equate the project, as Citus
needs (`bench/run.py --citus`)."""

from __future__ import annotations

from datetime import timedelta

from bench.loader import DEVICES

GPUS_PER_HOST = {"gpu": 4, "dmatrix": 1, "groq": 1}
BURST_EVERY, BURST_TASKS = 2000, 50


def gpus_of(server: str) -> list[str]:
    return [f"{server}-gpu{k}" for k in range(GPUS_PER_HOST[server.split("-")[0]])]


def load(cursor, *, project_id: int, every_s: int = 30) -> bool:
    """Add the fleet unless it is there. Returns whether it was added."""
    from ingest import partitions

    cursor.execute("SELECT 1 FROM ingest_device WHERE project_id = %s AND role = 'gpu' LIMIT 1", [project_id])
    if cursor.fetchone():
        return False
    cursor.execute("SELECT min(started_at), max(ended_at) FROM ingest_task WHERE project_id = %s", [project_id])
    first, last = cursor.fetchone()
    span_days = (last - first).days + 2
    partitions.ensure(table="ingest_resourcesample", times=[first + timedelta(days=d) for d in range(span_days)])
    hardware = {"gpu": ("nvidia", "NVIDIA H100 80GB HBM3"), "dmatrix": ("dmatrix", "Corsair"), "groq": ("groq", "LPU")}
    for server in DEVICES:
        cursor.execute("UPDATE ingest_device SET role = 'server', host = name, vendor = '', hardware = ''"
                       " WHERE project_id = %s AND name = %s", [project_id, server])
        vendor, model = hardware[server.split("-")[0]]
        for gpu in gpus_of(server):
            cursor.execute("""INSERT INTO ingest_device (project_id, name, vendor, hardware, host, role, first_seen, last_seen)
                              VALUES (%s, %s, %s, %s, %s, 'gpu', %s, %s) ON CONFLICT DO NOTHING""",
                           [project_id, gpu, vendor, model, server, first, last])
    # Servers: waiting requests with a flood in one hour of 40, running requests, KV-cache use.
    cursor.execute("""
        INSERT INTO ingest_resourcesample (project_id, device, ts, queue_depth, batch_size, kv_cache_usage, extra)
        SELECT %(p)s, d, ts, CASE WHEN (extract(epoch FROM ts)::bigint / 3600) %% 40 = k THEN 30 + 10 * random() ELSE floor(2 * random()) END,
               6 + 4 * random(), 0.35 + 0.2 * random(), '{}'
        FROM unnest(%(servers)s::text[]) WITH ORDINALITY s(d, k),
             generate_series(%(a)s::timestamptz, %(b)s::timestamptz, %(step)s * interval '1 second') ts""",
                   {"p": project_id, "servers": DEVICES, "a": first, "b": last, "step": every_s})
    # GPUs: DCGM clock vs max, clock-event reasons (a power brake in one hour of 50), power against
    # its limit, temperature, utilisation.
    gpus = [g for s in DEVICES for g in gpus_of(s)]
    cursor.execute("""
        INSERT INTO ingest_resourcesample (project_id, device, ts, utilization, sm_clock_mhz, sm_clock_max_mhz,
                                           clock_reasons, power_w, temperature_c, extra)
        SELECT %(p)s, d, ts, 0.4 + 0.5 * random(),
               CASE WHEN braked THEN 600 + 200 * random() ELSE 1900 + 80 * random() END, 1980,
               CASE WHEN braked THEN 136 ELSE 0 END, 350 + 300 * random(), 50 + 15 * random(),
               '{"power_limit_w": 700}'::jsonb
        FROM (SELECT d, ts, (extract(epoch FROM ts)::bigint / 3600) %% 50 = k AS braked
              FROM unnest(%(gpus)s::text[]) WITH ORDINALITY g(d, k),
                   generate_series(%(a)s::timestamptz, %(b)s::timestamptz, %(step)s * interval '1 second') ts) x""",
                   {"p": project_id, "gpus": gpus, "a": first, "b": last, "step": every_s})
    # Hardware findings on the first LLM call (s0) of the tasks of each burst, on the call's own server.
    cursor.execute("""
        INSERT INTO analysis_finding (project_id, task_id, kind, step_ids, wasted_ms, severity, summary, evidence,
                                      confidence, confidence_reason, task_started_at, release, created_at)
        SELECT t.project_id, t.id, k.kind, '{s0}', s.duration_ms * 0.5, 'high', 'chat took long because of its server',
               jsonb_build_object('device', s.device, 'verdict', replace(k.kind, 'hardware_', ''),
                                  'evidence', jsonb_build_array('41 requests waiting vs a usual 1'),
                                  'signals', jsonb_build_object('queue_depth', jsonb_build_object('value', 41, 'normal', 1, 'z', 20, 'source', s.device),
                                                                'clock_reasons', jsonb_build_object('value', 136, 'source', s.device || '-gpu0'))),
               'high', '', t.started_at, t.release, now()
        FROM ingest_task t
        JOIN ingest_step s ON s.task_id = t.id AND s.project_id = t.project_id AND s.step_id = 's0'
        CROSS JOIN LATERAL (SELECT (ARRAY['hardware_queueing', 'hardware_throttling', 'hardware_kv_cache_pressure'])
                                   [1 + (t.id / %(every)s) %% 3] AS kind) k
        WHERE t.project_id = %(p)s AND t.id %% %(every)s < %(burst)s""",
                   {"p": project_id, "every": BURST_EVERY, "burst": BURST_TASKS})
    # vLLM request spans under the last day's LLM calls: step s(i) after the call s(i-1). Their
    # attributes are written as JSON text: Citus refuses jsonb_build_object (STABLE) of columns in
    # an UPDATE of a distributed table.
    figures = {"queue_ms": "c.duration_ms * 0.1", "prefill_ms": "c.ttft_ms * 0.8", "ttft_ms": "c.ttft_ms * 0.9",
               "decode_ms": "c.duration_ms - c.ttft_ms", "e2e_ms": "c.duration_ms * 0.97"}
    serving = " || ', ' || ".join(f"""'"{key}": ' || coalesce(round(({expr})::numeric, 3)::text, 'null')"""
                                  for key, expr in figures.items())
    cursor.execute(f"""
        UPDATE ingest_step x SET kind = 'other', name = 'llm_request', parent_step_id = c.step_id, device = c.device,
               attributes = ('{{"agentops.serving": {{' || {serving} || '}}}}')::jsonb
        FROM ingest_step c
        WHERE x.project_id = %(p)s AND x.kind = 'framework' AND x.started_at >= %(since)s
          AND c.task_id = x.task_id AND c.project_id = x.project_id AND c.kind = 'llm' AND c.started_at >= %(since)s
          AND c.step_id = 's' || (substr(x.step_id, 2)::int - 1)::text""",
                   {"p": project_id, "since": last - timedelta(days=1)})
    cursor.execute("ANALYZE ingest_resourcesample")
    cursor.execute("ANALYZE analysis_finding")
    cursor.execute("ANALYZE ingest_device")
    return True
