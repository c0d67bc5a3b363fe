"""A task's analysis keyed and distributed by project, the one data table analysis 0015 left out
(docs/scaling.md, step 6).

0015 kept `analysis_taskanalysis` keyed by `task_id` alone because the analysis claim said
`ON CONFLICT (task_id)`, and Postgres takes as that statement's arbiter only a unique index of
exactly those columns; the claim now names `(task_id, project_id)` (analysis/engine/batch.py).
So, on every PostgreSQL:

- the primary key becomes (task_id, project_id): project_id last, as in ingest 0018 (its
  docstring says why), so the lookups of a task's analysis keep their index; Django's key stays
  `task`;
- the foreign key to the task, (task_id, project_id) → ingest_task (id, project_id), which 0015
  added on plain PostgreSQL, is added on Citus too, once the table is distributed (Citus allows
  no foreign key from a local table to a distributed one, which is why 0015 could not);
- where Citus is installed, the table (until now a Citus local table on the coordinator, through
  its foreign key to the project, a reference table) is distributed by project_id, co-located
  with ingest_task (ingest/distribution.py, `DISTRIBUTED_TASK_ANALYSIS`).

Reversible on plain PostgreSQL (the key of 0015 again), not on Citus (ingest/distribution.py,
`refuse_on_citus`).
"""

from django.db import migrations

from ingest import distribution as d

TABLE = "analysis_taskanalysis"


def forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        d.replace_key(cursor, table=TABLE, name=f"{TABLE}_pkey", kind="PRIMARY KEY",
                      columns="task_id, project_id")
        if d.citus_present(cursor):
            d.distribute(cursor, distributed=d.DISTRIBUTED_TASK_ANALYSIS)
            d.task_foreign_key(cursor, table=TABLE)


def backward(apps, schema_editor):
    """On plain PostgreSQL: the key of 0015 again (its foreign key to the task stays, as 0015 has
    it there)."""
    with schema_editor.connection.cursor() as cursor:
        d.refuse_on_citus(cursor, "analysis 0016")
        d.replace_key(cursor, table=TABLE, name=f"{TABLE}_pkey", kind="PRIMARY KEY", columns="task_id")


class Migration(migrations.Migration):

    dependencies = [
        ("analysis", "0015_citus_distribution"),
    ]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
