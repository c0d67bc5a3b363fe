"""`manage.py compare_releases A B [--project P] [--fail-on-regression PCT]`: the release
comparison as a table in a terminal or a CI log.

Exit status: 0 when no task name regressed (or no --fail-on-regression was given), 1 when some
task name's p50 or p95 grew by at least PCT percent and the change is significant at --alpha,
2 when the input is wrong (unknown project or release, bad filter)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from analysis.filters import FilterError
from analysis.releases.compare import UnknownRelease, parse_threshold, release_compare
from analysis.releases.scope import parse_compare_filters
from analysis.releases.stats import DEFAULT_ALPHA, DEFAULT_THRESHOLD_PCT
from analysis.units import fmt_ms
from ingest.models import Project

EXIT_REGRESSION = 1
EXIT_USAGE = 2


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}%"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Command(BaseCommand):
    help = "Compare the latency of release B against release A; optionally fail on a regression."

    def add_arguments(self, parser):
        parser.add_argument("a", help="baseline release")
        parser.add_argument("b", help="candidate release")
        parser.add_argument("--project", help="project name (needed when there are several)")
        parser.add_argument("--fail-on-regression", type=float, metavar="PCT", dest="fail_pct",
                            help="exit 1 when a task name's p50 or p95 grew by at least PCT%% "
                                 "and the change is significant")
        parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="significance level")
        parser.add_argument("--environment", default="")
        parser.add_argument("--name", default="", help="only tasks of this name")
        parser.add_argument("--vendor", default="", help="only tasks that ran on this device vendor")
        parser.add_argument("--since", default="")
        parser.add_argument("--until", default="")
        parser.add_argument("--top", type=int, default=8, help="rows of the attribution table")

    def handle(self, *args, **opts):
        project = self._project(opts["project"])
        threshold = opts["fail_pct"] if opts["fail_pct"] is not None else DEFAULT_THRESHOLD_PCT
        params = {"environment": opts["environment"], "name": opts["name"], "vendor": opts["vendor"],
                  "since": opts["since"], "until": opts["until"],
                  "threshold_pct": str(threshold), "alpha": str(opts["alpha"])}
        try:
            filters = parse_compare_filters(params)
            threshold, alpha = parse_threshold(params)
            report = release_compare(project=project, a=opts["a"], b=opts["b"], filters=filters,
                                     threshold_pct=threshold, alpha=alpha).report
        except (FilterError, UnknownRelease) as exc:
            raise CommandError(str(exc), returncode=EXIT_USAGE) from None
        self.stdout.write(self._render(report, top=opts["top"]))
        regressed = [r["name"] for r in report["tasks"] if r["regressed"]]
        if opts["fail_pct"] is not None and regressed:
            raise CommandError(f"regression of at least {threshold:g}% at p50 or p95 in: {', '.join(regressed)}",
                               returncode=EXIT_REGRESSION)

    def _project(self, name: str | None) -> Project:
        if name:
            project = Project.objects.filter(name=name).first()
            if project is None:
                raise CommandError(f"--project: no project named {name!r}", returncode=EXIT_USAGE)
            return project
        projects = list(Project.objects.order_by("name")[:2])
        if len(projects) != 1:
            raise CommandError("--project: required when there is not exactly one project",
                               returncode=EXIT_USAGE)
        return projects[0]

    def _render(self, report: dict, *, top: int) -> str:
        a, b = report["a"], report["b"]
        out = [f"{a} → {b} in project {report['project']} (regression: p50 or p95 +"
               f"{report['threshold_pct']:g}% or more, significant at alpha {report['alpha']:g})", ""]
        level = f"{100 * report['interval_level']:g}% CI of Δ p95"
        rows = [["task", "tasks A/B", "p50 A → B", "Δ p50", "p95 A → B", "Δ p95", level, "MW p", "verdict"]]
        for row in [*report["tasks"], report["overall"]]:
            p = {x["q"]: x for x in row["percentiles"]}
            ci = (f"[{fmt_ms(p[95]['ci_low_ms'])}, {fmt_ms(p[95]['ci_high_ms'])}]"
                  if p[95]["ci_low_ms"] is not None else "–")
            rows.append([row["name"] or "(all tasks)", f"{row['n_a']}/{row['n_b']}",
                         f"{fmt_ms(p[50]['a_ms'])} → {fmt_ms(p[50]['b_ms'])}", _pct(p[50]["delta_pct"]),
                         f"{fmt_ms(p[95]['a_ms'])} → {fmt_ms(p[95]['b_ms'])}", _pct(p[95]["delta_pct"]), ci,
                         "–" if row["p_value"] is None else f"{row['p_value']:.3g}", row["label"]])
        out += [_table(rows), "", "Where it changed (Δ mean self time per task within task names; "
                                  "* = changed significantly, listed first):"]
        steps = [["step", "Δ per task", "p50 per call A → B", "p95 A → B", "calls/task A → B"]]
        for r in report["attribution"]["steps"][:top]:
            steps.append([("* " if r["significant"] else "  ") + r["key"],
                          ("+" if r["contribution_ms"] > 0 else "") + fmt_ms(r["contribution_ms"]),
                          f"{fmt_ms(r['p50_a_ms'])} → {fmt_ms(r['p50_b_ms'])}",
                          f"{fmt_ms(r['p95_a_ms'])} → {fmt_ms(r['p95_b_ms'])}",
                          f"{r['calls_per_task_a']:.2f} → {r['calls_per_task_b']:.2f}"])
        out.append(_table(steps))
        for step in report["slower_steps"]:
            out.append(f"Calls got slower: {step['key']} (p50 per call {fmt_ms(step['p50_a_ms'])} → "
                       f"{fmt_ms(step['p50_b_ms'])}, +{fmt_ms(step['contribution_ms'])} per task)")
        changed = [f for f in report["findings"] if abs(f["delta_rate"]) >= 0.01]
        if changed:
            out += ["", "Findings:"] + [f"  {f['summary']}" for f in changed[:top]]
        for row in [*report["tasks"], report["overall"]]:
            for warning in row["warnings"][:1]:
                out.append(f"note ({row['name'] or 'all tasks'}): {warning}")
        return "\n".join(out) + "\n"
