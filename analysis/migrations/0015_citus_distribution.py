"""The analysis tables keyed and distributed by project, as ingest 0018 did for the ingest tables
(the reasons, and why project_id comes last in each key, are in its docstring).

- ids from sequences instead of identity columns (findings, baselines, learned call graphs, prices);
- primary keys include project_id: (id, project_id) for findings, baselines and learned call
  graphs;
- findings refer to their task by (task_id, project_id), the foreign key ingest 0018 dropped with
  the task's old key;
- where Citus is installed, for both apps (ingest/distribution.py): projects, keys and model
  prices become reference tables (a copy on every node); tasks, steps, samples, releases,
  devices, histograms, instrumentation counts, findings, baselines, learned call graphs and every
  rollup table are distributed by project_id, co-located with ingest_task. Auth, sessions,
  project members, the audit trail, the rollup state (refresh watermarks, no project) and the
  alert tables stay local on the coordinator (Citus local tables where they refer to a project).

Not yet: a task's analysis (`analysis_taskanalysis`) keeps its key `task_id`, because the claim in
analysis/engine/batch.py names it (`ON CONFLICT (task_id)`), and Postgres takes as the arbiter only
a unique index of exactly those columns. Widening the key belongs with the change of the claim
(ingest/distribution.py, `NOT_YET_DISTRIBUTED`). Until then its foreign key to the task is
(task_id, project_id) → ingest_task (id, project_id) on PostgreSQL, and absent on Citus, where the
table stays a local table on the coordinator and Citus allows no foreign key from a local table to
a distributed one.

Reversible on plain PostgreSQL, not on Citus (ingest/distribution.py, `refuse_on_citus`).
"""

from django.db import migrations

from ingest import distribution as d

SEQUENCED = ("analysis_finding", "analysis_baseline", "analysis_agentprofile", "analysis_callpair",
             "analysis_modelprice")


def forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        d.sequence_ids(cursor, SEQUENCED)
        for table in ("analysis_finding", "analysis_baseline", "analysis_agentprofile",
                      "analysis_callpair"):
            d.replace_key(cursor, table=table, name=f"{table}_pkey", kind="PRIMARY KEY",
                          columns="id, project_id")
        citus = d.citus_present(cursor)
        if citus:
            d.distribute(cursor, reference=d.REFERENCE,
                         distributed=d.DISTRIBUTED_INGEST + d.DISTRIBUTED_ANALYSIS)
        d.task_foreign_key(cursor, table="analysis_finding")
        if not citus:
            d.task_foreign_key(cursor, table="analysis_taskanalysis")


def backward(apps, schema_editor):
    """On plain PostgreSQL: the keys and identity columns of 0014 again; ingest 0018's reverse,
    which runs next, gives findings and analyses their foreign keys to ingest_task (id) back."""
    with schema_editor.connection.cursor() as cursor:
        d.refuse_on_citus(cursor, "analysis 0015")
        for table in ("analysis_finding", "analysis_taskanalysis"):
            cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {table}_task_fk")
        for table in ("analysis_finding", "analysis_baseline", "analysis_agentprofile",
                      "analysis_callpair"):
            d.replace_key(cursor, table=table, name=f"{table}_pkey", kind="PRIMARY KEY", columns="id")
        d.identity_ids(cursor, SEQUENCED)


class Migration(migrations.Migration):

    dependencies = [
        ("analysis", "0014_task_rollup_turns"),
        ("ingest", "0018_citus_distribution"),
    ]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
