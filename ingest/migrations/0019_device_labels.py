"""Device.labels: whose a device is beyond its host (a server's pod and workload, a GPU's pod and
index, the server whose spans name it), for telling apart the servers that share a host and the
pods behind one Kubernetes Service (docs/otlp.md, "Which server and GPU served a call")."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0018_citus_distribution'),
    ]

    operations = [
        migrations.AddField(
            model_name='device',
            name='labels',
            field=models.JSONField(blank=True, db_default={}, default=dict),
        ),
    ]
