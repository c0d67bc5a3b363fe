"""`manage.py evaluate_detection`: score the findings against ground truth, per finding kind, by
the rules of analysis/simulator/evaluation.py (docs/analysis.md, "Evaluation"). One table in
every mode: labels; precision over asserted findings (confidence not low) and over surfaced
ones (all); recall by either; the share of found labels whose wasted time is within ±30 % of
the truth where the label carries it; each with its Wilson 95 % interval.

Sources of ground truth:
- `--simulate --seed S`: the simulator generates a workload (large enough for at least
  `--min-positives` labels of every kind), stores it in-process into `sim-<seed>` (emptied
  first), replays it in time order and scores it;
- `--corpus DIR`: a labelled corpus written outside the project (../shared/eval/ format:
  traces-*.pb, device-samples.json, labels.jsonl; device telemetry may come instead as OTLP
  metrics payloads, metrics-*.pb), posted through the product's own `/v1/traces`,
  `/v1/metrics` and `/api/v1/ingest` views into `corpus-<dir>` (emptied first), scored twice:
  per task, as the corpus's README states its bar, then matched by steps;
- `--recorded DIR`: traces recorded from real agent frameworks (tests/fixtures/agents/), each
  family replayed through the OTLP ingest path into `recorded-<family>` (emptied first);
- `--labels FILE --project NAME`: a labels file written by `simulate --labels`, against the
  findings the project holds (`--replay`: analyse the project in time order first).

Time order: every replay analyses the tasks in the order they ended, each with the baselines
the product could have had then — refreshed as the periodic job refreshes them, every
`--refresh-minutes` of the data's own time (0: before every task), from the steps that had
ended and the samples taken by then; a key first seen is computed on demand from the data
there was when its task ended, as the product does. Never from later data.

Always exits 0 once it could read its inputs: zeros are an honest answer when nothing
was detected."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Max
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from analysis.dashboard.selectors import finding_queryset
from analysis.engine import baselines, batch, learned
from analysis.measures import baseline_key
from analysis.models import Baseline
from analysis.simulator import recorded
from analysis.simulator.evaluation import (
    FindingView,
    LabelError,
    evaluate,
    format_table,
    read_labels,
    scoring_units,
)
from analysis.simulator.generate import KINDS, SimulationConfig, simulate
from analysis.simulator.sinks import store_in_process
from ingest.models import Project, Step, Task

# The product's beat refreshes baselines every 5 minutes (agentops/celery.py). A simulated week
# is refreshed hourly (2,000 refreshes would take minutes; an hour's staleness of a week's
# baselines moves no median): later, never earlier data than the product would have.
REFRESH_MINUTES = 5.0
SIMULATED_REFRESH_MINUTES = 60.0
MIN_POSITIVES = 50
# The simulated corpus: a week ending at a fixed hour, so a seed always gives the same data.
SIMULATED_UNTIL = datetime(2026, 11, 29, tzinfo=UTC)
SIMULATED_DAYS = 7
SIMULATED_TASKS = 3000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _DetectorFailures(logging.Handler):
    """Counts the detectors that raised during the run (analyse.run_detectors logs and goes on)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.count, self.tasks, self.first = 0, set(), ""

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("analysis.detector_failed"):
            self.count += 1
            self.tasks.add(record.args[1] if isinstance(record.args, tuple) and len(record.args) > 1 else "")
            self.first = self.first or record.getMessage()


class Command(BaseCommand):
    help = "Score findings against ground truth: precision, recall and wasted time per finding kind."

    def add_arguments(self, parser):
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--simulate", action="store_true", help="generate a labelled workload (--seed) and score it")
        source.add_argument("--labels", help="labels file written by simulate --labels")
        source.add_argument("--recorded", help="folder of recorded framework traces (tests/fixtures/agents)")
        source.add_argument("--corpus", help="folder of a labelled corpus (../shared/eval/corpus-a)")
        parser.add_argument("--project", default="demo", help="with --labels: project whose findings to score")
        parser.add_argument("--replay", action="store_true", help="with --labels: re-analyse the project in time order")
        parser.add_argument("--seed", type=int, default=0, help="with --simulate")
        parser.add_argument("--tasks", type=int, default=None,
                            help=f"with --simulate: tasks to start from (default {SIMULATED_TASKS}; grown until "
                                 "every kind has --min-positives labels)")
        parser.add_argument("--min-positives", type=int, default=MIN_POSITIVES,
                            help="with --simulate: labels every kind must have")
        parser.add_argument("--refresh-minutes", type=float, default=None,
                            help=f"baseline refresh interval in the data's time (default {REFRESH_MINUTES:g}, "
                                 f"the product's; --simulate: {SIMULATED_REFRESH_MINUTES:g}; --recorded: 0, "
                                 "before every task)")

    def handle(self, *args, **o):
        failures = _DetectorFailures()
        analysis_log = logging.getLogger("agentops.analysis")
        analysis_log.addHandler(failures)
        level = analysis_log.level
        if o.get("verbosity", 1) < 2:
            # The workers' routine lines (a batch analysed, baselines refreshed: hundreds in a run)
            # would bury the tables; warnings and errors, a failing detector's among them, still show.
            analysis_log.setLevel(max(logging.WARNING, analysis_log.getEffectiveLevel()))
        try:
            self.results = self._run(**o)  # the scores, for callers in this process (call_command)
            if failures.count:
                # A detector that raised lost its findings on those tasks: the scores above are
                # of a crippled run, not of the rules.
                self.stderr.write(f"{failures.count} detector failure{'s' if failures.count != 1 else ''} "
                                  f"(analysis.detector_failed) on {len(failures.tasks)} tasks, first: "
                                  f"{failures.first}: those tasks lost that detector's findings")
        finally:
            analysis_log.removeHandler(failures)
            analysis_log.setLevel(level)
            if getattr(self, "_called_from_command_line", False):
                # The embedded services that loading the settings started for this command stop
                # with it (ones already running stay). Only as `manage.py evaluate_detection`:
                # called from another program (call_command), they are that program's.
                from django.conf import settings
                from django.db import connections

                from agentops import embedded

                connections.close_all()
                embedded.stop_started(settings.DATA_DIR)

    def _run(self, **o):
        refresh = o["refresh_minutes"]
        if refresh is not None and refresh < 0:
            raise CommandError("--refresh-minutes: 0 or more")
        if o["corpus"]:
            return self._corpus(Path(o["corpus"]), refresh=REFRESH_MINUTES if refresh is None else refresh)
        if o["recorded"]:
            return self._recorded(Path(o["recorded"]), refresh=0.0 if refresh is None else refresh)
        if o["simulate"]:
            return self._simulate(seed=o["seed"], tasks=o["tasks"], min_positives=o["min_positives"],
                                  refresh=SIMULATED_REFRESH_MINUTES if refresh is None else refresh)
        try:
            with open(o["labels"], encoding="utf-8") as fh:
                label_rows = read_labels(fh)
        except OSError as exc:
            raise CommandError(f"--labels: cannot read {o['labels']!r}: {exc.strerror}") from None
        except LabelError as exc:
            raise CommandError(f"--labels {o['labels']}: {exc}") from None
        project = Project.objects.filter(name=o["project"]).first()
        if project is None:
            raise CommandError(f"--project: no project named {o['project']!r}")
        if o["replay"]:
            self._replay(project, refresh=REFRESH_MINUTES if refresh is None else refresh)
        return self._score(project, label_rows)

    def _score(self, project: Project, label_rows: list[dict]):
        findings = project_findings(project)
        result = evaluate(label_rows, findings)
        low = sum(not f.asserted for f in findings)
        self.stdout.write(f"Project {project.name!r}: {len(findings)} findings ({low} low-confidence), "
                          f"{len(label_rows)} labels ({len(scoring_units(label_rows))} scored units).")
        self.stdout.write(format_table(result))
        return result

    def _replay(self, project: Project, *, refresh: float) -> int:
        started = time.monotonic()
        n = replay_in_time_order(project, refresh_minutes=refresh)
        self.stdout.write(f"Analysed {n} tasks in the order they ended, baselines refreshed every "
                          f"{refresh:g} min of the data's time ({time.monotonic() - started:.1f} s).")
        return n

    def _recorded(self, directory: Path, *, refresh: float):
        if not directory.is_dir():
            raise CommandError(f"--recorded: {str(directory)!r} is not a folder")
        folders = recorded.families(directory)
        if not folders:
            raise CommandError(f"--recorded: no recorded requests (*.pb, *.json) under {str(directory)!r}")
        results, every_label, every_finding = {}, [], []
        for folder in folders:
            try:
                label_rows = recorded.labels(folder)
            except LabelError as exc:
                raise CommandError(f"--recorded {folder}/labels.jsonl: {exc}") from None
            self.stdout.write(f"\n== {folder.name}")
            project = replay_and_analyse(folder, refresh_minutes=refresh)
            results[folder.name] = self._score(project, label_rows)
            every_label += label_rows
            every_finding += project_findings(project)
        if len(folders) > 1:  # trace ids are unique across families: the pooled table is theirs together
            self.stdout.write(f"\n== all {len(folders)} families")
            results["all"] = evaluate(every_label, every_finding)
            self.stdout.write(format_table(results["all"]))
        return results

    def _corpus(self, directory: Path, *, refresh: float):
        if not (directory / "labels.jsonl").is_file() or not list(directory.glob("traces-*.pb")):
            raise CommandError(f"--corpus: {str(directory)!r} holds no labels.jsonl and traces-*.pb")
        with (directory / "labels.jsonl").open(encoding="utf-8") as fh:
            try:
                label_rows = read_labels(fh)
            except LabelError as exc:
                raise CommandError(f"--corpus {directory}/labels.jsonl: {exc}") from None
        started = time.monotonic()
        project, stored = corpus_replay(directory, log=self.stdout.write, refresh_minutes=refresh)
        self.stdout.write(f"Corpus {directory.name!r}: {stored} tasks stored and analysed in the order they ended, "
                          f"baselines refreshed every {refresh:g} min of the data's time "
                          f"({time.monotonic() - started:.1f} s; project {project.name!r}).")
        # A corpus states its own scoring (corpus-a's README: per task); that table is its bar.
        # The stricter one, matched by steps as every other source is, follows it.
        self.stdout.write("\nScored as the corpus states (per task: a finding matches every label of its task and kind):")
        per_task = evaluate(label_rows, project_findings(project), by_steps=False)
        self.stdout.write(format_table(per_task))
        self.stdout.write("\nMatched by steps (|F ∩ L| ≥ ½ · max(|F|, |L|)), as every source is:")
        return {"per task": per_task, "by steps": self._score(project, label_rows)}

    def _simulate(self, *, seed: int, tasks: int | None, min_positives: int, refresh: float):
        started = time.monotonic()
        sim, config = simulated_corpus(seed=seed, tasks=tasks, min_positives=min_positives)
        counts = {kind: sum(1 for u in scoring_units(sim.labels) if u["kind"] == kind) for kind in KINDS}
        project, _ = Project.objects.get_or_create(name=f"sim-{seed}")
        _empty(project)
        store_in_process(project=project, batches=sim.events(chunk=5000), progress=lambda n: None)
        self.stdout.write(f"Simulated seed {seed}: {config.tasks} tasks over {SIMULATED_DAYS} days, {sim.step_count} "
                          f"steps, {sim.sample_count} telemetry data points into {project.name!r} "
                          f"({time.monotonic() - started:.1f} s); labels per kind: "
                          + ", ".join(f"{k}={counts[k]}" for k in KINDS))
        self._replay(project, refresh=refresh)
        return self._score(project, sim.labels)


def simulated_corpus(*, seed: int, tasks: int | None = None, min_positives: int = MIN_POSITIVES):
    """The simulator's workload for `seed`: `tasks` tasks (default SIMULATED_TASKS), grown by a
    quarter at a time until every kind has at least `min_positives` scored labels."""
    n = tasks or SIMULATED_TASKS
    end = SIMULATED_UNTIL.timestamp() * 1000
    while True:
        config = SimulationConfig(tasks=n, start_ms=end - SIMULATED_DAYS * 86_400_000, end_ms=end, seed=seed)
        sim = simulate(config)
        units = scoring_units(sim.labels)
        if all(sum(1 for u in units if u["kind"] == kind) >= min_positives for kind in KINDS):
            return sim, config
        if n > 200_000:
            raise CommandError(f"--min-positives {min_positives}: not reached with {n} tasks")
        n = int(n * 1.25)


def _empty(project: Project) -> None:
    Task.objects.filter(project=project).delete()
    Baseline.objects.filter(project=project).delete()
    from ingest.models import ResourceSample

    ResourceSample.objects.filter(project=project).delete()


def replay_in_time_order(project: Project, *, refresh_minutes: float = REFRESH_MINUTES) -> int:
    """Analyse every task of `project` in the order the tasks ended, each with the baselines the
    product could have had at that moment and never later ones. The periodic refresh runs at
    every multiple of `refresh_minutes` of the data's time that a task's end passes (0: at every
    task's end), over the keys and devices with new data since the previous one, from the steps
    that had ended and the samples taken by then. The tasks that ended before the next refresh
    are analysed together (the product's batch path) with those baselines; a key they need that
    has none yet is computed from the data there was at the refresh (the product computes it
    when the task is analysed, from the few runs there are: under the 20 a baseline needs either
    way), so the analysis never computes one from everything stored. Returns the tasks analysed."""
    Baseline.objects.filter(project=project).delete()
    learned.forget(project_id=project.pk)
    period = timedelta(minutes=refresh_minutes)
    # A task whose end never came ended, as far as anyone knows, with its last step.
    tasks = sorted(((pk, ended_at or last_step or _EPOCH) for pk, ended_at, last_step in
                    Task.objects.filter(project=project).annotate(last_step=Max("steps__ended_at"))
                    .values_list("pk", "ended_at", "last_step")), key=lambda t: (t[1], t[0]))
    windows: dict[datetime, list[int]] = {}
    for pk, end in tasks:
        windows.setdefault(end if not period else _floor(end, period), []).append(pk)
    last: datetime | None = None
    for boundary, pks in windows.items():
        baselines.baselines_as_of(project=project, until=boundary, since=last)
        # What the agents' runs that had ended by then say of their calls, as the workers learn it.
        learned.refresh_due(through=boundary, project_id=project.pk, limit=10_000)
        last = boundary
        for start in range(0, len(pks), batch.BATCH_TASKS):
            chunk = pks[start:start + batch.BATCH_TASKS]
            steps = Step.objects.filter(project=project, task_id__in=chunk).exclude(kind="agent")
            keys = {(kind, baseline_key(SimpleNamespace(kind=kind, name=name, model=model, tool_name=tool)))
                    for kind, name, model, tool in steps.values_list("kind", "name", "model", "tool_name").distinct()}
            devices = set(steps.exclude(device="").values_list("device", flat=True).distinct())
            baselines.baselines_ensure(project=project, keys=keys, devices=devices, until=boundary)
            token, claimed = batch.claim_ids(chunk, projects=[project.pk], force=True)
            batch.analyse_claimed(claimed, token=token)
    return len(tasks)


def _floor(moment: datetime, period: timedelta) -> datetime:
    return _EPOCH + ((moment - _EPOCH) // period) * period


def corpus_replay(directory: Path, *, log=print, refresh_minutes: float = REFRESH_MINUTES) -> tuple[Project, int]:
    """POST the corpus through the ingest views (the same code as over HTTP, in this process):
    device-samples.json to /api/v1/ingest, metrics-*.pb to /v1/metrics, traces-*.pb to /v1/traces;
    then analyse every task in the order the tasks ended (`replay_in_time_order`)."""
    from django.conf import settings
    from django.test import Client

    from ingest.models import IngestKey
    from ingest.services import key_create

    project, _ = Project.objects.get_or_create(name=f"corpus-{directory.name}")
    _empty(project)
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
    for path in sorted(directory.glob("metrics-*.pb")):
        # Device telemetry as exporters send it (dcgm-exporter, vLLM through a Prometheus receiver).
        r = client.post("/v1/metrics", path.read_bytes(), content_type="application/x-protobuf")
        if r.status_code != 200:
            raise CommandError(f"--corpus {path.name}: /v1/metrics answered {r.status_code} {r.content[:300]!r}")
        reply = ExportMetricsServiceResponse.FromString(r.content)
        if reply.partial_success.rejected_data_points:
            log(f"{path.name}: {reply.partial_success.rejected_data_points} data points refused: "
                f"{reply.partial_success.error_message[:300]}")
    for path in sorted(directory.glob("traces-*.pb")):
        r = client.post("/v1/traces", path.read_bytes(), content_type="application/x-protobuf")
        if r.status_code != 200:
            raise CommandError(f"--corpus {path.name}: /v1/traces answered {r.status_code} {r.content[:300]!r}")
        reply = ExportTraceServiceResponse.FromString(r.content)
        if reply.partial_success.rejected_spans:
            log(f"{path.name}: {reply.partial_success.rejected_spans} spans refused: "
                f"{reply.partial_success.error_message[:300]}")
    return project, replay_in_time_order(project, refresh_minutes=refresh_minutes)


def project_findings(project: Project) -> list[FindingView]:
    """Every finding of the project, any confidence."""
    rows = finding_queryset(project=project).values_list(
        "task__task_id", "kind", "step_ids", "evidence", "confidence", "wasted_ms").iterator(chunk_size=5000)
    return [FindingView(task_id, kind, tuple(step_ids or ()), evidence or {}, confidence, wasted_ms)
            for task_id, kind, step_ids, evidence, confidence, wasted_ms in rows]


def replay_and_analyse(folder: Path, *, refresh_minutes: float = 0.0) -> Project:
    """A fresh `recorded-<family>` project holding the family's traces, analysed in time order."""
    project, _ = Project.objects.get_or_create(name=f"recorded-{folder.name}")
    _empty(project)
    recorded.replay(project=project, directory=folder)
    replay_in_time_order(project, refresh_minutes=refresh_minutes)
    return project

