# Spans shaped as the Vercel AI SDK writes them, counted per scope (ingest/instrumentation.py AI_SDK_KEYS):
# the SDK traces under the application's own scope, so its spans tell the library, not the scope name.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0011_step_tool_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='instrumentationcount',
            name='ai_sdk_shape',
            field=models.BigIntegerField(db_default=0, default=0),
        ),
    ]
