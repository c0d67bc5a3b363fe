"""`manage.py evaluate_detection --labels FILE [--project NAME]`: precision, recall and F1 of the
project's findings per kind against the simulator's ground truth (see
analysis/simulator/evaluation.py for the matching rules).

`manage.py evaluate_detection --recorded DIR`: the same for traces recorded from real agent
frameworks (tests/fixtures/agents/): each family is replayed through the OTLP ingest path into a
project of its own (`recorded-<family>`, emptied first), analysed, and scored against its labels.

Only the findings the product counts are scored: low-confidence ones ("possible") are shown to
users but claimed nowhere, so they are reported beside the table (`--include-low` scores them
too). Always exits 0 once it could read its inputs: zeros are an honest answer when nothing
was detected."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from analysis.dashboard.selectors import finding_queryset
from analysis.engine import baselines, pipeline
from analysis.models import Baseline, Finding
from analysis.simulator import recorded
from analysis.simulator.evaluation import (
    FindingView,
    LabelError,
    evaluate,
    format_table,
    read_labels,
)
from ingest.models import Project, Task


class Command(BaseCommand):
    help = "Score findings against ground truth: precision / recall / F1 per finding kind."

    def add_arguments(self, parser):
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--labels", help="labels file written by simulate --labels")
        source.add_argument("--recorded", help="folder of recorded framework traces (tests/fixtures/agents)")
        parser.add_argument("--project", default="demo", help="with --labels: project whose findings to score")
        parser.add_argument("--include-low", action="store_true", help="score low-confidence findings too")

    def handle(self, *args, labels, recorded: str | None, project, include_low, **options):
        if recorded:
            return self._recorded(Path(recorded), include_low=include_low)
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
        self._score(project_obj, label_rows, include_low=include_low)

    def _score(self, project: Project, label_rows: list[dict], *, include_low: bool):
        findings, low = project_findings(project, include_low=include_low)
        result = evaluate(label_rows, findings)
        self.stdout.write(f"Project {project.name!r}: {len(findings)} findings scored "
                          f"({low} low-confidence {'included' if include_low else 'not scored'}), "
                          f"{len(label_rows)} labels.")
        self.stdout.write(format_table(result))
        return result

    def _recorded(self, directory: Path, *, include_low: bool):
        if not directory.is_dir():
            raise CommandError(f"--recorded: {str(directory)!r} is not a folder")
        folders = recorded.families(directory)
        if not folders:
            raise CommandError(f"--recorded: no recorded requests (*.pb) under {str(directory)!r}")
        for folder in folders:
            try:
                label_rows = recorded.labels(folder)
            except LabelError as exc:
                raise CommandError(f"--recorded {folder}/labels.jsonl: {exc}") from None
            project = replay_and_analyse(folder)
            self.stdout.write(f"\n== {folder.name}")
            self._score(project, label_rows, include_low=include_low)


def project_findings(project: Project, *, include_low: bool) -> tuple[list[FindingView], int]:
    rows = finding_queryset(project=project).values_list(
        "task__task_id", "kind", "step_ids", "evidence", "confidence").iterator(chunk_size=5000)
    findings, low = [], 0
    for task_id, kind, step_ids, evidence, confidence in rows:
        low += confidence == Finding.CONFIDENCE_LOW
        if include_low or confidence != Finding.CONFIDENCE_LOW:
            findings.append(FindingView(task_id, kind, tuple(step_ids or ()), evidence or {}))
    return findings, low


def replay_and_analyse(folder: Path) -> Project:
    """A fresh `recorded-<family>` project holding the family's traces, analysed."""
    project, _ = Project.objects.get_or_create(name=f"recorded-{folder.name}")
    Task.objects.filter(project=project).delete()
    Baseline.objects.filter(project=project).delete()
    recorded.replay(project=project, directory=folder)
    baselines.baselines_refresh(project=project, full=True)
    for pk in Task.objects.filter(project=project).order_by("started_at", "pk").values_list("pk", flat=True):
        pipeline.run(pk, force=True)
    return project
