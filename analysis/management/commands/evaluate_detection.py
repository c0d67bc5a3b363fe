"""`manage.py evaluate_detection --labels FILE [--project NAME]`: precision, recall and F1 of the
project's findings per kind against the simulator's ground truth (see
analysis/simulator/evaluation.py for the matching rules).

`manage.py evaluate_detection --recorded DIR`: the same for traces recorded from real agent
frameworks (tests/fixtures/agents/): each family is replayed through the OTLP ingest path into a
project of its own (`recorded-<family>`, emptied first), analysed, and scored against its labels.

Only the findings the product counts are scored: low-confidence ones ("possible") are shown to
users but claimed nowhere, so they are reported beside the table (`--include-low` scores them
too).

`manage.py evaluate_detection --corpus DIR`: a labelled corpus written outside the project
(../shared/eval/ format: traces-*.pb, device-samples.json, labels.jsonl) is posted through the
product's own `/v1/traces` and `/api/v1/ingest` views into a project `corpus-<dir>` (emptied
first), analysed, and scored as that corpus's README says: at the task level, precision over
asserted findings, recall over every surfaced one, each with its Wilson 95 % interval.

Always exits 0 once it could read its inputs: zeros are an honest answer when nothing
was detected."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

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
        source.add_argument("--corpus", help="folder of a labelled corpus (../shared/eval/corpus-a)")
        parser.add_argument("--project", default="demo", help="with --labels: project whose findings to score")
        parser.add_argument("--include-low", action="store_true", help="score low-confidence findings too")

    def handle(self, *args, labels, recorded: str | None, corpus: str | None, project, include_low, **options):
        if corpus:
            return self._corpus(Path(corpus))
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


    def _corpus(self, directory: Path):
        from analysis.simulator.evaluation import corpus_score, format_corpus_table

        if not (directory / "labels.jsonl").is_file() or not list(directory.glob("traces-*.pb")):
            raise CommandError(f"--corpus: {str(directory)!r} holds no labels.jsonl and traces-*.pb")
        with (directory / "labels.jsonl").open(encoding="utf-8") as fh:
            try:
                label_rows = [json.loads(line) for line in fh if line.strip()]
            except json.JSONDecodeError as exc:
                raise CommandError(f"--corpus {directory}/labels.jsonl: line {exc.lineno}: {exc.msg}") from None
        project, stored = corpus_replay(directory, log=self.stdout.write)
        rows = list(Finding.objects.filter(project=project).values_list("task__task_id", "kind", "confidence"))
        self.stdout.write(f"Corpus {directory.name!r}: {stored} tasks stored and analysed, "
                          f"{len(rows)} findings, {len(label_rows)} labels (project {project.name!r}).")
        self.stdout.write(format_corpus_table(corpus_score(label_rows, rows)))


def corpus_replay(directory: Path, *, log=print) -> tuple[Project, int]:
    """POST the corpus through the ingest views (the same code as over HTTP, in this process),
    then analyse every task in the order the tasks ended."""
    from django.conf import settings
    from django.test import Client

    from ingest.models import IngestKey
    from ingest.services import key_create

    project, _ = Project.objects.get_or_create(name=f"corpus-{directory.name}")
    Task.objects.filter(project=project).delete()
    Baseline.objects.filter(project=project).delete()
    _, key = key_create(project=project, scopes=[IngestKey.SCOPE_INGEST])
    host = next((h for h in settings.ALLOWED_HOSTS if h not in ("*",) and not h.startswith(".")), "localhost")
    client = Client(HTTP_HOST=host.strip("[]") if host != "[::1]" else "localhost",
                    HTTP_AUTHORIZATION=f"Bearer {key}")
    samples = directory / "device-samples.json"
    if samples.is_file():
        events = json.loads(samples.read_text(encoding="utf-8")).get("events", [])
        for start in range(0, len(events), 5000):
            r = client.post("/api/v1/ingest", json.dumps({"events": events[start:start + 5000]}),
                            content_type="application/json")
            if r.status_code != 200 or r.json()["rejected"]:
                raise CommandError(f"--corpus {samples.name}: {r.status_code} {r.content[:300]!r}")
    for path in sorted(directory.glob("traces-*.pb")):
        r = client.post("/v1/traces", path.read_bytes(), content_type="application/x-protobuf")
        if r.status_code != 200:
            raise CommandError(f"--corpus {path.name}: /v1/traces answered {r.status_code} {r.content[:300]!r}")
        reply = ExportTraceServiceResponse.FromString(r.content)
        if reply.partial_success.rejected_spans:
            log(f"{path.name}: {reply.partial_success.rejected_spans} spans refused: "
                f"{reply.partial_success.error_message[:300]}")
    baselines.baselines_refresh(project=project, full=True)
    pks = list(Task.objects.filter(project=project).order_by("ended_at", "pk").values_list("pk", flat=True))
    for pk in pks:
        pipeline.run(pk, force=True)
    return project, len(pks)


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
