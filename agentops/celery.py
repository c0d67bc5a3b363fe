"""The Celery app and its beat schedule. Tasks live in analysis.engine.tasks, analysis.rollups.tasks,
analysis.alerts.tasks and ingest.tasks."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

app = Celery("agentops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["analysis.engine", "analysis.rollups", "analysis.alerts", "ingest"])

# Beat's jobs get a queue of their own (runstack gives it its own worker process), so alert
# evaluation never waits behind a backlog of analysis jobs.
PERIODIC_TASKS = {"analysis.sweep", "analysis.refresh_baselines", "analysis.maintain_partitions",
                  "analysis.alerts.tasks.evaluate_alerts", "analysis.refresh_rollups"}


# Alert deliveries get another (its worker runs threads: the work is waiting on the network), so
# a dead webhook never delays evaluation, the sweep or the rollups (analysis/alerts/delivery.py).
DELIVERY_TASKS = {"analysis.alerts.deliver"}


def periodic_queue() -> str:
    return f"{app.conf.task_default_queue}.periodic"


def alerts_queue() -> str:
    return f"{app.conf.task_default_queue}.alerts"


def route_task(name, args, kwargs, options, task=None, **kw):
    if name in PERIODIC_TASKS:
        return {"queue": periodic_queue()}
    if name in DELIVERY_TASKS:
        return {"queue": alerts_queue()}
    return None


app.conf.task_routes = (route_task,)

app.conf.beat_schedule = {
    "maintain-partitions": {"task": "analysis.maintain_partitions", "schedule": 3600.0,
                            "options": {"expires": 3000}},
    "evaluate-alerts": {"task": "analysis.alerts.tasks.evaluate_alerts", "schedule": 60.0,
                        "options": {"expires": 50}},
    # Due tasks the ingest signal missed (broker down, worker killed, end never reported).
    "analysis-sweep": {"task": "analysis.sweep", "schedule": 5.0, "options": {"expires": 5}},
    "analysis-baselines": {"task": "analysis.refresh_baselines", "schedule": 300.0,
                           "options": {"expires": 290}},
    # Each agent's call dependencies, learned from its recent runs (analysis/engine/learned.py);
    # on the analysis queue, not the periodic one.
    "analysis-learn-dependencies": {"task": "analysis.learn_dependencies", "schedule": 60.0,
                                    "options": {"expires": 55}},
    # Latency rollups: recompute the hours that changed (analysis/rollups/).
    "analysis-rollups": {"task": "analysis.refresh_rollups", "schedule": 60.0, "options": {"expires": 55}},
}
