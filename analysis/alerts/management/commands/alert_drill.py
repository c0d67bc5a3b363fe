"""Send a burst of slow (or fast) tasks "now", to watch an alert rule fire and recover.

    python manage.py alert_drill --project demo                      # 60 slow checkout-agent tasks
    python manage.py alert_drill --project demo --duration-ms 400 --tasks 1200   # recovery traffic

Tasks go through ingest's one write path (`batch_store`), spread over the last
`--spread-minutes`, so they sit in a rule's window for that long after the drill. Each task has
one LLM step and one tool step, so step and TTFT rules see traffic too."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError

from ingest.models import Project
from ingest.records import Batch, StepRecord, TaskRecord
from ingest.services import batch_store


class Command(BaseCommand):
    help = "Ingest a burst of slow (or fast) tasks now, to exercise alert rules."

    def add_arguments(self, parser):
        parser.add_argument("--project", default="demo")
        parser.add_argument("--name", default="checkout-agent", help="task name")
        parser.add_argument("--environment", default="production")
        parser.add_argument("--release", default="v3")
        parser.add_argument("--device", default="groq-lpu-01")
        parser.add_argument("--tasks", type=int, default=60)
        parser.add_argument("--duration-ms", type=float, default=9000.0)
        parser.add_argument("--ttft-ms", type=float, default=None, help="default: 10%% of the duration")
        parser.add_argument("--spread-minutes", type=float, default=2.0)

    def handle(self, *args, project, name, environment, release, device, tasks, duration_ms, ttft_ms,
               spread_minutes, **options):
        target = Project.objects.filter(name=project).first()
        if target is None:
            raise CommandError(f"no project named {project!r}")
        if tasks < 1 or duration_ms <= 0 or spread_minutes <= 0:
            raise CommandError("--tasks, --duration-ms and --spread-minutes must be positive")
        now = datetime.now(tz=UTC)
        ttft = ttft_ms if ttft_ms is not None else duration_ms * 0.1
        run = uuid.uuid4().hex[:8]
        step = timedelta(minutes=spread_minutes) / tasks
        batch = Batch()
        for i in range(tasks):
            began = now - timedelta(minutes=spread_minutes) + step * i
            task_id = f"drill-{run}-{i}"
            ended = began + timedelta(milliseconds=duration_ms)
            llm_end = began + timedelta(milliseconds=duration_ms * 0.7)
            batch.tasks.append(TaskRecord(task_id=task_id, name=name, name_given=True, release=release,
                                          environment=environment,
                                          started_at=began, ended_at=ended, status="ok"))
            batch.steps.append(StepRecord(step_id="llm", task_id=task_id, started_at=began, ended_at=llm_end,
                                          kind="llm", name="chat", model="llama-3.1-8b", device=device,
                                          ttft_ms=ttft, output_tokens=200, input_tokens=1500))
            batch.steps.append(StepRecord(step_id="tool", task_id=task_id, started_at=llm_end, ended_at=ended,
                                          kind="tool", name="search", tool_name="search",
                                          tool_args={"q": f"order {i}"}))
        batch_store(project=target, batch=batch)
        self.stdout.write(f"Ingested {tasks} {name} tasks of {duration_ms:g} ms in {project} "
                          f"({environment}, {release}) over the last {spread_minutes:g} min.")
