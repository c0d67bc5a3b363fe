"""Where Citus is installed, the coordinator's own copy of the distributed and reference tables'
rows is emptied (docs/scaling.md, step 6).

Distributing a table that holds rows copies them to its shards and leaves the originals in the
coordinator's table, never read again but on its disk for good. On a new database the tables
were empty when ingest 0018 and analysis 0015 distributed them; a database that held rows then,
or analyses when 0016 distributed `analysis_taskanalysis` (a Citus local table until then, its
rows on the coordinator), keeps such copies. `distribute` now drops them as it distributes
(ingest/distribution.py, `drop_local_copies`); this does it once for the tables distributed
before. The shards keep every row.

Nothing to do on plain PostgreSQL, and nothing to undo.
"""

from django.db import migrations

from ingest import distribution as d


def forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        if d.citus_present(cursor):
            d.drop_local_copies(cursor, [*d.REFERENCE, *d.DISTRIBUTED])


class Migration(migrations.Migration):

    dependencies = [
        ("analysis", "0016_citus_task_analysis"),
        ("ingest", "0018_citus_distribution"),
    ]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop, elidable=False)]
