"""The Celery app and its beat schedule. Tasks live in analysis.tasks."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

app = Celery("agentops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["analysis", "analysis.alerts"])

app.conf.beat_schedule = {
    "evaluate-alerts": {"task": "analysis.alerts.tasks.evaluate_alerts", "schedule": 60.0,
                        "options": {"expires": 50}},
    # Due tasks the ingest signal missed (broker down, worker killed, end never reported).
    "analysis-sweep": {"task": "analysis.sweep", "schedule": 5.0, "options": {"expires": 5}},
    "analysis-baselines": {"task": "analysis.refresh_baselines", "schedule": 300.0,
                           "options": {"expires": 290}},
}
