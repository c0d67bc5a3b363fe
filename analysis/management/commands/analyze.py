"""`manage.py analyze [--all] [--task ID] [--project NAME] [--due]`: run the analysis
synchronously, through the same claim-and-replace path the Celery workers use."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from analysis.engine import baselines, batch
from ingest.models import Project, Task


class Command(BaseCommand):
    help = "Analyse tasks now (findings, critical path, budget, what-if)."

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="every task (of --project, if given)")
        parser.add_argument("--task", help="one task id (with --project when ids repeat across projects)")
        parser.add_argument("--project", help="project name")
        parser.add_argument("--due", action="store_true", help="only tasks that are due (ended and quiet)")

    def handle(self, *args, **opts):
        if not (opts["all"] or opts["task"] or opts["due"]):
            raise CommandError("say what to analyse: --all, --due or --task ID")
        tasks = Task.objects.all()
        projects = Project.objects.all()
        if opts["project"]:
            project = Project.objects.filter(name=opts["project"]).first()
            if project is None:
                raise CommandError(f"no project named {opts['project']!r}")
            tasks = tasks.filter(project=project)
            projects = projects.filter(pk=project.pk)
        if opts["task"]:
            tasks = tasks.filter(task_id=opts["task"])
            if not tasks.exists():
                raise CommandError(f"no task {opts['task']!r}")
        rows = list(tasks.order_by("started_at", "pk").values_list("pk", "step_count", "project_id"))
        pks = [pk for pk, *_ in rows]
        if not opts["task"]:  # one task computes what it lacks on demand
            for project in projects.filter(pk__in=tasks.values("project_id")):
                baselines.baselines_refresh(project=project, full=True)
        started = time.monotonic()
        counts: dict[str, int] = {}
        steps = 0
        skipped = {"n": 0}

        def claims():
            # The batch path the workers run (analysis/engine/batch.py): one claim, a few set-based
            # loads and one write per chunk, the next chunk loaded while this one is analysed.
            done = 0
            for chunk, chunk_projects in _chunks(rows):
                token, claimed = batch.claim_ids(chunk, projects=chunk_projects, force=not opts["due"])
                skipped["n"] += len(chunk) - len(claimed)
                yield token, claimed
                done += len(chunk)
                elapsed = time.monotonic() - started
                self.stderr.write(f"\ranalysed {done}/{len(pks)} tasks ({done / elapsed:.0f}/s)", ending="")
                self.stderr.flush()

        outcome = batch.analyse_pipelined(claims())
        for key, value in (("analysed", outcome.get("analysed", 0)), ("claim_lost", outcome.get("claim_lost", 0)),
                           ("failed", outcome.get("failed", 0)),
                           ("not_due" if opts["due"] else "claimed_elsewhere", skipped["n"])):
            if value:
                counts[key] = counts.get(key, 0) + value
        if pks:
            self.stderr.write("")
            steps = sum(count for _, count, _ in rows)
        elapsed = time.monotonic() - started
        summary = ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "nothing to do"
        self.stdout.write(f"{len(pks)} tasks, {steps} steps in {elapsed:.1f}s "
                          f"({steps / elapsed if elapsed else 0:.0f} steps/s): {summary}")


def _chunks(rows: list[tuple[int, int, int]]):
    """(task ids, their projects) in batches of at most BATCH_TASKS tasks and BATCH_STEPS steps
    (at least one task)."""
    chunk: list[int] = []
    projects: set[int] = set()
    steps = 0
    for pk, count, project_id in rows:
        if chunk and (len(chunk) >= batch.BATCH_TASKS or steps + count > batch.BATCH_STEPS):
            yield chunk, sorted(projects)
            chunk, projects, steps = [], set(), 0
        chunk.append(pk)
        projects.add(project_id)
        steps += count
    if chunk:
        yield chunk, sorted(projects)
