"""Turn ingest_step and ingest_resourcesample into tables partitioned by week (see
ingest/partitions.py). Existing rows move into the DEFAULT partition; the first batch of each
week moves them into that week's partition. Django's model state is unchanged: `id` stays
unique (one sequence), so the ORM may keep treating it as the key."""

from django.db import migrations

STEP_COLUMNS = """
    step_id varchar(128) NOT NULL, parent_step_id varchar(128) NOT NULL, kind varchar(16) NOT NULL,
    name varchar(200) NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz NOT NULL,
    duration_ms double precision NOT NULL, status varchar(16) NOT NULL, error text NOT NULL,
    depends_on varchar(128)[] NOT NULL, attributes jsonb NOT NULL, events jsonb NOT NULL,
    model varchar(200) NOT NULL, provider varchar(100) NOT NULL, device varchar(200) NOT NULL,
    input_tokens integer NULL, output_tokens integer NULL, cached_tokens integer NULL,
    ttft_ms double precision NULL, streamed boolean NULL, tool_name varchar(200) NOT NULL,
    tool_args jsonb NULL, project_id bigint NOT NULL, task_id bigint NOT NULL
"""
STEP_NAMES = ("id, step_id, parent_step_id, kind, name, started_at, ended_at, duration_ms, status, "
              "error, depends_on, attributes, events, model, provider, device, input_tokens, "
              "output_tokens, cached_tokens, ttft_ms, streamed, tool_name, tool_args, project_id, task_id")

SAMPLE_COLUMNS = """
    device varchar(200) NOT NULL, ts timestamptz NOT NULL, utilization double precision NULL,
    queue_depth double precision NULL, batch_size double precision NULL, power_w double precision NULL,
    temperature_c double precision NULL, mem_bw_util double precision NULL,
    kv_cache_hit_rate double precision NULL, tokens_per_s double precision NULL,
    throttled double precision NULL, extra jsonb NOT NULL, project_id bigint NOT NULL
"""
SAMPLE_NAMES = ("id, device, ts, utilization, queue_depth, batch_size, power_w, temperature_c, "
                "mem_bw_util, kv_cache_hit_rate, tokens_per_s, throttled, extra, project_id")


def _convert(table: str, column: str, columns: str, names: str) -> str:
    return f"""
    CREATE SEQUENCE {table}_id_seq_p;
    CREATE TABLE {table}_new (id bigint NOT NULL DEFAULT nextval('{table}_id_seq_p'), {columns})
        PARTITION BY RANGE ({column});
    CREATE TABLE {table}_default PARTITION OF {table}_new DEFAULT;
    INSERT INTO {table}_new ({names}) SELECT {names} FROM {table};
    SELECT setval('{table}_id_seq_p', coalesce(max(id), 0) + 1, false) FROM {table}_new;
    DROP TABLE {table};
    ALTER TABLE {table}_new RENAME TO {table};
    ALTER SEQUENCE {table}_id_seq_p RENAME TO {table}_id_seq;
    ALTER SEQUENCE {table}_id_seq OWNED BY {table}.id;
    ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id, {column});
    ALTER TABLE {table} ADD CONSTRAINT {table}_project_fk FOREIGN KEY (project_id)
        REFERENCES ingest_project (id) DEFERRABLE INITIALLY DEFERRED;
    """


SQL = (
    _convert("ingest_step", "started_at", STEP_COLUMNS, STEP_NAMES)
    + """
    ALTER TABLE ingest_step ADD CONSTRAINT step_unique_id UNIQUE (task_id, step_id, started_at);
    ALTER TABLE ingest_step ADD CONSTRAINT ingest_step_task_fk FOREIGN KEY (task_id)
        REFERENCES ingest_task (id) DEFERRABLE INITIALLY DEFERRED;
    CREATE INDEX step_kind_name_time ON ingest_step (project_id, kind, name, started_at);
    CREATE INDEX step_model_time ON ingest_step (project_id, model, started_at) WHERE NOT (model = '');
    CREATE INDEX step_device_time ON ingest_step (project_id, device, started_at) WHERE NOT (device = '');
    CREATE INDEX step_started_brin ON ingest_step USING brin (started_at);
    """
    + _convert("ingest_resourcesample", "ts", SAMPLE_COLUMNS, SAMPLE_NAMES)
    + """
    ALTER TABLE ingest_resourcesample ADD CONSTRAINT sample_unique_device_ts UNIQUE (project_id, device, ts);
    """
)


class Migration(migrations.Migration):
    dependencies = [("ingest", "0003_drop_redundant_fk_indexes")]

    operations = [migrations.RunSQL(SQL, reverse_sql=migrations.RunSQL.noop)]
