# A device's host set by hand (admin), kept when the exporters report another: where a server's
# address and its GPUs' host differ (docs/otlp.md, "Which server and GPU served a call").

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0012_instrumentation_ai_sdk_shape'),
    ]

    operations = [
        migrations.AddField(
            model_name='device',
            name='host_by_hand',
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
