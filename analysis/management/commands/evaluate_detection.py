"""`manage.py evaluate_detection --labels FILE [--project NAME]`: precision, recall and F1 of the
project's findings per kind against the simulator's ground truth (see
analysis/simulator/evaluation.py for the matching rules). Always exits 0 once it could read
its inputs: zeros are an honest answer when nothing was detected."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from analysis.selectors import finding_queryset
from analysis.simulator.evaluation import (
    FindingView,
    LabelError,
    evaluate,
    format_table,
    read_labels,
)
from ingest.models import Project


class Command(BaseCommand):
    help = "Score findings against simulator labels: precision / recall / F1 per finding kind."

    def add_arguments(self, parser):
        parser.add_argument("--labels", required=True, help="labels file written by simulate --labels")
        parser.add_argument("--project", default="demo", help="project whose findings to score (default demo)")

    def handle(self, *args, labels, project, **options):
        try:
            with open(labels, encoding="utf-8") as fh:
                label_rows = read_labels(fh)
        except OSError as exc:
            raise CommandError(f"--labels: cannot read {labels!r}: {exc.strerror}") from None
        except LabelError as exc:
            raise CommandError(f"--labels {labels}: {exc}") from None
        project_obj = Project.objects.filter(name=project).first()
        if project_obj is None:
            raise CommandError(f"--project: no project named {project!r}")
        findings = [
            FindingView(task_id, kind, tuple(step_ids or ()), evidence or {})
            for task_id, kind, step_ids, evidence in finding_queryset(project=project_obj)
            .values_list("task__task_id", "kind", "step_ids", "evidence").iterator(chunk_size=5000)
        ]
        result = evaluate(label_rows, findings)
        self.stdout.write(f"Project {project_obj.name!r}: {len(findings)} findings, {len(label_rows)} labels.")
        self.stdout.write(format_table(result))
