"""Bulk loader for the query benchmarks: tasks and steps generated inside Postgres with
generate_series (not through HTTP), so 10M steps load in minutes, in chunks with progress.

Shape: `tasks` tasks of `steps_per_task` steps over the last 30 days, 3 releases, 5 task names,
step kinds llm/tool/retrieval/framework with models, devices and tool names; durations are
skewed (the product of two uniforms, hashed from the ids: the same on every run and engine) so
percentiles are not trivial. One extra task has `big_task_steps` steps (the 50,000-step
waterfall)."""

from __future__ import annotations

from bench.harness import progress

NAMES = ["customer-support", "coding-agent", "travel-planner", "checkout-agent", "research-agent"]
RELEASES = ["v1", "v2", "v3"]
TOOLS = ["search_orders", "get_weather", "run_tests", "book_flight", "fetch_doc", "search_inventory"]
MODELS = ["llama-3.1-70b", "llama-3.1-8b", "mixtral-8x7b"]
DEVICES = ["gpu-0", "gpu-1", "dmatrix-0", "dmatrix-1", "groq-0", "groq-1"]


def _sql_array(values: list[str]) -> str:
    return "ARRAY[" + ",".join(f"'{v}'" for v in values) + "]"


def _uniform(expr: str) -> str:
    """SQL for a number in [0, 1) hashed from `expr`: random() in effect, but the same on every
    run and engine (so two loads answer the same counts), and immutable, which Citus needs to push
    a statement down to the shard (it refuses to push a volatile random() in a subquery)."""
    return f"((hashint8(({expr})::bigint)::bigint + 2147483648) / 4294967296.0)::float8"


def load(cursor, *, project_id: int, tasks: int, steps_per_task: int, big_task_steps: int = 50_000,
         chunk_tasks: int = 25_000) -> dict:
    from datetime import UTC, datetime, timedelta

    from ingest import partitions

    # Weekly partitions first, as batch_store would make them: rows must not pile up in the
    # default partition, or the timings would be of a table the product never has.
    now = datetime.now(tz=UTC)
    partitions.ensure(table="ingest_step", times=[now - timedelta(days=d) for d in range(0, 32)])
    names, releases = _sql_array(NAMES), _sql_array(RELEASES)
    tools, models, devices = _sql_array(TOOLS), _sql_array(MODELS), _sql_array(DEVICES)
    for first in range(0, tasks, chunk_tasks):
        last = min(first + chunk_tasks, tasks)
        cursor.execute(f"""
            INSERT INTO ingest_task (project_id, task_id, name, release, environment, session_id,
                started_at, ended_at, duration_ms, status, attributes, reported, step_count,
                input_tokens, output_tokens, error_count, last_event_at)
            SELECT %(p)s, 'task-' || g, ({names})[1 + g %% 5], ({releases})[1 + (g / 7) %% 3],
                   'production', 'sess-' || (g / 4),
                   now() - interval '30 days' + (g::float8 / %(n)s) * interval '30 days',
                   now() - interval '30 days' + (g::float8 / %(n)s) * interval '30 days'
                       + (d || ' milliseconds')::interval,
                   d, CASE WHEN g %% 50 = 0 THEN 'error' ELSE 'ok' END, '{{}}', true, %(spt)s,
                   %(spt)s * 600, %(spt)s * 60, (g %% 50 = 0)::int, now() - interval '1 hour'
            FROM (SELECT g, (2000 + 8000 * {_uniform("g")} * {_uniform("-1 - g")})::float8 AS d
                  FROM generate_series(%(a)s, %(b)s - 1) g) s
        """, {"p": project_id, "n": tasks, "spt": steps_per_task, "a": first, "b": last})
        cursor.execute(f"""
            INSERT INTO ingest_step (project_id, task_id, step_id, parent_step_id, kind, name,
                started_at, ended_at, duration_ms, status, error, depends_on, attributes, events,
                model, provider, device, input_tokens, output_tokens, cached_tokens, ttft_ms,
                streamed, tool_name, tool_args)
            SELECT t.project_id, t.id, 's' || i, CASE WHEN i = 0 THEN '' ELSE 's0' END,
                   k.kind, k.name,
                   t.started_at + (i * t.duration_ms / %(spt)s || ' milliseconds')::interval,
                   t.started_at + (i * t.duration_ms / %(spt)s + k.d || ' milliseconds')::interval,
                   k.d, 'ok', '', '{{}}', '{{}}', '[]',
                   CASE WHEN k.kind = 'llm' THEN ({models})[1 + i %% 3] ELSE '' END, '',
                   CASE WHEN k.kind = 'llm' THEN ({devices})[1 + (t.id + i) %% 6] ELSE '' END,
                   CASE WHEN k.kind = 'llm' THEN 500 + i * 100 END,
                   CASE WHEN k.kind = 'llm' THEN 80 END, NULL,
                   CASE WHEN k.kind = 'llm' THEN k.d * 0.2 END, NULL,
                   CASE WHEN k.kind = 'tool' THEN k.name ELSE '' END,
                   CASE WHEN k.kind = 'tool' THEN jsonb_build_object('id', t.id %% 1000) END
            FROM ingest_task t
            CROSS JOIN generate_series(0, %(spt)s - 1) i
            CROSS JOIN LATERAL (
                SELECT CASE i %% 4 WHEN 0 THEN 'llm' WHEN 1 THEN 'tool' WHEN 2 THEN 'llm'
                                   ELSE (CASE WHEN i %% 8 = 3 THEN 'retrieval' ELSE 'framework' END) END AS kind,
                       CASE i %% 4 WHEN 1 THEN ({tools})[1 + (t.id + i) %% 6]
                                   WHEN 3 THEN 'step-' || (i %% 8)::text ELSE 'chat' END AS name,
                       (t.duration_ms / %(spt)s) * (0.3 + {_uniform("t.id * 64 + i")}) AS d
            ) k
            WHERE t.project_id = %(p)s AND t.task_id IN (
                SELECT 'task-' || g FROM generate_series(%(a)s, %(b)s - 1) g)
        """, {"p": project_id, "spt": steps_per_task, "a": first, "b": last})
        progress("bulk load (tasks)", last, tasks)
    if big_task_steps:
        cursor.execute("""
            INSERT INTO ingest_task (project_id, task_id, name, release, environment, session_id,
                started_at, ended_at, duration_ms, status, attributes, reported, step_count,
                input_tokens, output_tokens, error_count, last_event_at)
            VALUES (%(p)s, 'big-task', 'research-agent', 'v1', 'production', '', now() - interval '1 day',
                    now() - interval '1 day' + interval '2 hours', 7200000, 'ok', '{}', true, %(n)s,
                    0, 0, 0, now() - interval '1 hour')
        """, {"p": project_id, "n": big_task_steps})
        cursor.execute("""
            INSERT INTO ingest_step (project_id, task_id, step_id, parent_step_id, kind, name,
                started_at, ended_at, duration_ms, status, error, depends_on, attributes, events,
                model, provider, device, tool_name, tool_args, input_tokens, output_tokens, ttft_ms)
            SELECT t.project_id, t.id, 'b' || i,
                   CASE WHEN i = 0 THEN '' WHEN i %% 10 = 1 THEN 'b0' ELSE 'b' || (i - i %% 10 + 1) END,
                   CASE WHEN i %% 2 = 0 THEN 'llm' ELSE 'tool' END,
                   CASE WHEN i %% 2 = 0 THEN 'chat' ELSE 'fetch_doc' END,
                   t.started_at + (i * 144 || ' milliseconds')::interval,
                   t.started_at + (i * 144 + 120 || ' milliseconds')::interval,
                   120, 'ok', '', '{}', '{}', '[]',
                   CASE WHEN i %% 2 = 0 THEN 'llama-3.1-70b' ELSE '' END, '',
                   CASE WHEN i %% 2 = 0 THEN 'gpu-0' ELSE '' END,
                   CASE WHEN i %% 2 = 1 THEN 'fetch_doc' ELSE '' END,
                   CASE WHEN i %% 2 = 1 THEN jsonb_build_object('url', 'doc-' || i) END,
                   CASE WHEN i %% 2 = 0 THEN 1000 END, CASE WHEN i %% 2 = 0 THEN 40 END,
                   CASE WHEN i %% 2 = 0 THEN 30.0 END
            FROM ingest_task t CROSS JOIN generate_series(0, %(n)s - 1) i
            WHERE t.project_id = %(p)s AND t.task_id = 'big-task'
        """, {"p": project_id, "n": big_task_steps})
    cursor.execute("ANALYZE ingest_task")
    cursor.execute("ANALYZE ingest_step")
    return {"tasks": tasks + (1 if big_task_steps else 0),
            "steps": tasks * steps_per_task + big_task_steps}


def decorate(cursor, *, project_id: int, finding_every: int = 20) -> None:
    """What the analysis would have written, so the dashboard queries read real volumes: an
    analysis row (critical path, budget, wasted time) per task and a finding on one task in
    `finding_every`."""
    cursor.execute("""
        INSERT INTO analysis_taskanalysis (task_id, project_id, analyzed_at, analyzed_through, claim_token,
            critical_path, budget, whatif, wasted_ms, top_finding, finding_kinds)
        SELECT id, project_id, last_event_at, last_event_at, '', '{s0,s1,s2}',
               jsonb_build_object('prefill', duration_ms * 0.2, 'decode', duration_ms * 0.4,
                                  'tool', duration_ms * 0.3, 'framework', duration_ms * 0.1),
               '{}', CASE WHEN id %% %(every)s = 0 THEN duration_ms * 0.2 ELSE 0 END,
               CASE WHEN id %% %(every)s = 0 THEN 'repeated_tool_call' ELSE '' END,
               CASE WHEN id %% %(every)s = 0 THEN '{repeated_tool_call}'::varchar[] ELSE '{}' END
        FROM ingest_task WHERE project_id = %(p)s
    """, {"p": project_id, "every": finding_every})
    cursor.execute("""
        INSERT INTO analysis_finding (project_id, task_id, kind, step_ids, wasted_ms, severity, summary,
                                      evidence, task_started_at, release, created_at)
        SELECT project_id, id, 'repeated_tool_call', '{s1}', duration_ms * 0.2, 'medium', 'repeat', '{}',
               started_at, release, now()
        FROM ingest_task WHERE project_id = %(p)s AND id %% %(every)s = 0
    """, {"p": project_id, "every": finding_every})
    cursor.execute("ANALYZE analysis_taskanalysis")
    cursor.execute("ANALYZE analysis_finding")


def catalog(cursor, *, project_id: int) -> None:
    """The release and device rows ingest records as it goes: the Releases and Devices pages list
    them, so without them those pages would be timed on an empty project. Idempotent."""
    cursor.execute("""
        INSERT INTO ingest_release (project_id, name, first_seen, last_seen)
        SELECT project_id, release, min(started_at), max(started_at) FROM ingest_task
        WHERE project_id = %(p)s GROUP BY 1, 2 ON CONFLICT DO NOTHING""", {"p": project_id})
    hardware = {"gpu": ("nvidia", "H100"), "dmatrix": ("dmatrix", "Corsair"), "groq": ("groq", "LPU")}
    for device in DEVICES:
        vendor, model = hardware[device.split("-")[0]]
        cursor.execute("""
            INSERT INTO ingest_device (project_id, name, vendor, hardware, first_seen, last_seen)
            SELECT %(p)s, %(name)s, %(vendor)s, %(hw)s, min(started_at), max(started_at) FROM ingest_task
            WHERE project_id = %(p)s ON CONFLICT DO NOTHING""",
                       {"p": project_id, "name": device, "vendor": vendor, "hw": model})
