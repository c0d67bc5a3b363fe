"""Keys Citus can distribute by project (docs/scaling.md, step 6), on every PostgreSQL.

Citus requires every primary key and unique constraint of a distributed table to contain the
distribution column, foreign keys between distributed tables to include it, and no identity
columns. These constraints are just as valid on plain PostgreSQL, so there is one schema: this
migration changes the keys of the ingest tables everywhere. Where the citus extension is
installed, analysis 0015 then makes the project and key tables reference tables and distributes
the data tables by project_id: last, once every key of both apps is in shape, because a reference
table turns every local table that refers to it into a Citus local table, on which Citus refuses
most DDL (DROP IDENTITY among it).

Why project_id comes *last* in every widened key: the keys stay the indexes every existing lookup
uses ("the task with this id", "the steps of this task", "this step of this task"), whose leading
columns are unchanged, so single-node plans and ingest cost stay as they were (no extra index);
Citus only asks that the column be in the key, not where.

Why Django keeps `id` as its primary key (no CompositePrimaryKey, though Django 5.2 has one):
every id still comes from one sequence, so it is unique in fact, and the ORM's lookups, foreign
keys and admin keep working unchanged; a composite key in the model would change every
`pk=` and every relation in the code for no gain in what the database guarantees. The database
key is the wider one, as for the partitioned steps since 0004. The model state is unchanged.

The task's key is referenced by analysis tables (findings, analyses): dropping it drops their
foreign keys (CASCADE), and analysis 0015, which runs right after, adds them back as
(task_id, project_id) → ingest_task (id, project_id). Hence the dependency on the latest analysis
migration before it (0014). Reversible on plain PostgreSQL (the keys, foreign keys and identity
columns of 0017 again); not on Citus, like analysis 0015: distributed tables do not go back to
local ones in a migration.
"""

from django.db import migrations

from ingest import distribution as d

# The tables with an identity id (steps and samples have had a sequence since 0004).
SEQUENCED = ("ingest_project", "ingest_ingestkey", "ingest_task", "ingest_release", "ingest_device",
             "ingest_latencyhistogram", "ingest_instrumentationcount")


# Keys as they were before (reverse, plain PostgreSQL only): (table, constraint, kind, columns).
_KEYS = (("ingest_step", "ingest_step_pkey", "PRIMARY KEY", "id, started_at"),
         ("ingest_step", "step_unique_id", "UNIQUE", "task_id, step_id, started_at"),
         ("ingest_resourcesample", "ingest_resourcesample_pkey", "PRIMARY KEY", "id, ts"),
         *((table, f"{table}_pkey", "PRIMARY KEY", "id") for table in (
             "ingest_release", "ingest_device", "ingest_latencyhistogram", "ingest_instrumentationcount")))


def forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        d.sequence_ids(cursor, SEQUENCED)
        # CASCADE: the step, finding and analysis foreign keys to ingest_task (id) go with it.
        cursor.execute("ALTER TABLE ingest_task DROP CONSTRAINT ingest_task_pkey CASCADE")
        cursor.execute("ALTER TABLE ingest_task ADD CONSTRAINT ingest_task_pkey PRIMARY KEY (id, project_id)")
        for table, name, kind, columns in _KEYS:
            d.replace_key(cursor, table=table, name=name, kind=kind, columns=f"{columns}, project_id")
        cursor.execute("ALTER TABLE ingest_step DROP CONSTRAINT IF EXISTS ingest_step_task_fk")
        d.task_foreign_key(cursor, table="ingest_step")


def backward(apps, schema_editor):
    """On plain PostgreSQL: the keys, foreign keys and identity columns of 0017 again (analysis
    0015's reverse, which runs first, took the analysis tables' wide foreign keys away)."""
    with schema_editor.connection.cursor() as cursor:
        d.refuse_on_citus(cursor, "ingest 0018")
        cursor.execute("ALTER TABLE ingest_step DROP CONSTRAINT IF EXISTS ingest_step_task_fk")
        cursor.execute("ALTER TABLE ingest_task DROP CONSTRAINT ingest_task_pkey CASCADE")
        cursor.execute("ALTER TABLE ingest_task ADD CONSTRAINT ingest_task_pkey PRIMARY KEY (id)")
        for table, name, kind, columns in _KEYS:
            d.replace_key(cursor, table=table, name=name, kind=kind, columns=columns)
        cursor.execute("ALTER TABLE ingest_step ADD CONSTRAINT ingest_step_task_fk FOREIGN KEY (task_id) "
                       "REFERENCES ingest_task (id) DEFERRABLE INITIALLY DEFERRED")
        for table in ("analysis_finding", "analysis_taskanalysis"):
            d.task_foreign_key_by_id(schema_editor, cursor, table=table)
        d.identity_ids(cursor, SEQUENCED)


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0017_step_ttft_cached_stream_indexes"),
        ("analysis", "0014_task_rollup_turns"),
    ]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
