"""The Celery app and its beat schedule. Tasks live in analysis.engine.tasks, analysis.rollups.tasks,
analysis.alerts.tasks and ingest.tasks."""

import logging
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

BEAT_SCHEDULE = {
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
app.conf.beat_schedule = BEAT_SCHEDULE


# Beat's routine jobs log three INFO lines a run through Celery (beat's "Sending due task", the
# worker's "received" and "succeeded"), the sweep every 5 s: ~2,500 lines in 25 minutes of an idle
# `make demo`, which scrolled the ingest key and the URL out of sight. Those lines are DEBUG here
# (LOG_LEVEL=DEBUG or `--loglevel DEBUG` shows them); a job's failure stays an error, and what a
# run did is the job's own named event (`analysis.sweep enqueued=3`).
# Read from the dict, not app.conf: reading app.conf loads Django's settings, and importing
# `agentops` (agentops.embedded, before the environment is set) must not.
ROUTINE_TASKS = frozenset(entry["task"] for entry in BEAT_SCHEDULE.values())
CELERY_TASK_LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")


def _task_of(record: logging.LogRecord) -> str | None:
    args = record.args
    if isinstance(args, dict):  # the worker's lines: a context dict with the task's name
        return args.get("name")
    if isinstance(args, tuple) and len(args) == 2:  # beat: (entry name, task name)
        return args[1]
    return None


class RoutineTasksAtDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or _task_of(record) not in ROUTINE_TASKS:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


for _name in CELERY_TASK_LOGGERS:
    logging.getLogger(_name).addFilter(RoutineTasksAtDebug())
