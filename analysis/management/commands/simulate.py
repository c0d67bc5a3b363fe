"""`manage.py simulate`: generate agent traffic and device telemetry with injected problems and
send it through the ingest path; `--labels FILE` writes the ground truth (JSON Lines).

In-process by default (the project is created if missing); `--url/--key` posts the same
native batches to a running server instead. `--dependencies evidence` (the default) shows
which call depends on which only the way real agents do, through tool results and call ids;
`declared` sends `depends_on` as well, for comparison. See docs/simulator.md.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from analysis.hardware import profile_for
from analysis.simulator.generate import DEPENDENCY_MODES, KINDS, SimulationConfig, simulate
from analysis.simulator.sinks import SinkError, post_http, store_in_process
from ingest.models import Project
from ingest.services import project_create

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    match = _DURATION.match(text or "")
    if not match:
        raise CommandError(f"--since: {text!r} is not a duration like 30m, 12h, 7d or 2w")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def parse_devices(text: str) -> tuple[tuple[str, int], ...]:
    devices = []
    for part in (text or "").split(","):
        family, _, count = part.strip().partition(":")
        try:
            model = profile_for(family)
        except KeyError as exc:
            raise CommandError(f"--devices: {exc.args[0]}") from None
        try:
            n = int(count or "1")
        except ValueError:
            raise CommandError(f"--devices: {part.strip()!r}: the count after ':' must be a number") from None
        if not 0 < n <= 64:
            raise CommandError(f"--devices: {part.strip()!r}: between 1 and 64 devices per family")
        if model.family in {family for family, _ in devices}:
            raise CommandError(f"--devices: {model.family} is named twice; give one count per family")
        devices.append((model.family, n))
    return tuple(devices)


def parse_until(text: str | None) -> datetime:
    if not text:
        # Whole hours, so reruns within the hour produce the same timestamps.
        return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"--until: {text!r} is not an RFC 3339 timestamp") from None
    if value.tzinfo is None:
        raise CommandError("--until: needs a time zone (e.g. 2026-11-01T00:00:00Z)")
    return value.astimezone(UTC)


class Command(BaseCommand):
    help = "Simulate agent tasks, steps and device telemetry with injected problems (and their labels)."

    def add_arguments(self, parser):
        parser.add_argument("--tasks", dest="tasks", type=int, default=1000)
        parser.add_argument("--releases", default="v1,v2,v3",
                            help="comma-separated, oldest first (second adds caching, third regresses a tool)")
        parser.add_argument("--devices", default="gpu:2,dmatrix:2,groq:2",
                            help="family:count, comma-separated; families gpu, dmatrix, groq")
        parser.add_argument("--anomaly-rate", dest="anomaly_rate", type=float, default=0.15,
                            help="share of tasks that get injected problems (0–1)")
        parser.add_argument("--seed", dest="seed", type=int, default=0)
        parser.add_argument("--since", dest="since", default="7d", help="period length before --until, e.g. 7d")
        parser.add_argument("--until", dest="until", default=None,
                            help="end of the period (RFC 3339); default: the current hour")
        parser.add_argument("--labels", dest="labels", default=None, help="write the ground truth here (JSON Lines)")
        parser.add_argument("--project", dest="project", default=None,
                            help="project name (in-process mode; created if missing)")
        parser.add_argument("--url", default=None, help="send over HTTP to this server instead")
        parser.add_argument("--key", default=None, help="ingest key for --url")
        parser.add_argument("--batch-size", dest="batch_size", type=int, default=5000)
        parser.add_argument("--environment", default="production")
        parser.add_argument("--dependencies", default="evidence", choices=DEPENDENCY_MODES,
                            help="evidence (default): dependencies show only through tool results and call "
                                 "ids, as real agents send them; declared: every step lists them in depends_on")

    def handle(self, *args, **o):
        try:
            return self._simulate(**o)
        finally:
            if o["url"] and getattr(self, "_called_from_command_line", False):
                # Sending over HTTP needs no local database: the embedded services that loading
                # the settings started for this command stop with it (ones already running stay).
                # Only as `manage.py simulate`: called from another program (call_command), the
                # services this process started are that program's.
                from django.conf import settings
                from django.db import connections

                from agentops import embedded

                connections.close_all()
                embedded.stop_started(settings.DATA_DIR)

    def _simulate(self, **o):
        if o["tasks"] < 0:
            raise CommandError("--tasks: must be 0 or more")
        if not 0.0 <= o["anomaly_rate"] <= 1.0:
            raise CommandError("--anomaly-rate: must be between 0 and 1")
        if not 1 <= o["batch_size"] <= 10_000:
            raise CommandError("--batch-size: between 1 and 10000 events")
        if o["url"] and not o["key"]:
            raise CommandError("--url needs --key (an ingest key of the target project)")
        if o["dependencies"] not in DEPENDENCY_MODES:
            raise CommandError(f"--dependencies: one of {', '.join(DEPENDENCY_MODES)}")
        if not o["url"] and not o["project"]:
            raise CommandError("--project is required (or --url and --key to send over HTTP)")
        releases = tuple(r.strip() for r in o["releases"].split(",") if r.strip())
        if not releases:
            raise CommandError("--releases: name at least one release")
        until = parse_until(o["until"])
        since = until - parse_duration(o["since"])
        if (until - since) < timedelta(hours=1):
            raise CommandError("--since: the simulated period must be at least 1h")
        config = SimulationConfig(
            tasks=o["tasks"], start_ms=since.timestamp() * 1000, end_ms=until.timestamp() * 1000,
            seed=o["seed"], releases=releases, devices=parse_devices(o["devices"]),
            anomaly_rate=o["anomaly_rate"], environment=o["environment"], dependencies=o["dependencies"],
        )

        started = time.monotonic()
        sim = simulate(config)
        generated = time.monotonic() - started
        if o["labels"]:
            try:
                with open(o["labels"], "w", encoding="utf-8") as fh:
                    for label in sim.labels:
                        fh.write(json.dumps(label, sort_keys=True) + "\n")
            except OSError as exc:
                raise CommandError(f"--labels: cannot write {o['labels']!r}: {exc.strerror}") from None

        total = sim.event_count
        progress = _Progress(total, self.stderr if o["verbosity"] > 0 else None)
        batches = sim.events(chunk=o["batch_size"])
        try:
            if o["url"]:
                rejected = post_http(url=o["url"], key=o["key"], batches=batches, progress=progress)
                where = o["url"]
            else:
                project = _project(o["project"], self.stderr)
                rejected = store_in_process(project=project, batches=batches, progress=progress)
                where = f"project {project.name!r}"
        except SinkError as exc:
            raise CommandError(str(exc)) from None
        progress.done()
        elapsed = time.monotonic() - started

        counts = sim.label_counts()
        self.stdout.write(
            f"Simulated {len(sim.tasks)} tasks, {sim.step_count} steps, {sim.sample_count} telemetry data points "
            f"into {where} in {elapsed:.1f} s (generation {generated:.1f} s, "
            f"{sim.step_count / max(elapsed, 1e-9):,.0f} steps/s)."
        )
        self.stdout.write(f"Dependencies: {config.dependencies}.")
        self.stdout.write(f"Injected problems: {sum(counts.values())} "
                          + ", ".join(f"{k}={counts[k]}" for k in KINDS))
        if rejected:
            self.stdout.write(self.style.WARNING(f"{rejected} events were rejected by ingest."))
        if o["labels"]:
            self.stdout.write(f"Ground truth: {o['labels']} ({len(sim.labels)} labels).")


def _project(name: str, stderr) -> Project:
    with transaction.atomic():
        project = Project.objects.filter(name=name).first()
        if project is None:
            project, plaintext = project_create(name=name)
            stderr.write(f"Created project {name!r}; its ingest key (shown once): {plaintext}")
    return project


class _Progress:
    """A one-line progress bar on stderr (nothing when quiet)."""

    def __init__(self, total: int, stream):
        self.total, self.stream, self.sent, self.started = max(total, 1), stream, 0, time.monotonic()

    def __call__(self, n: int) -> None:
        self.sent += n
        if self.stream is None:
            return
        share = self.sent / self.total
        bar = "#" * int(share * 30)
        rate = self.sent / max(time.monotonic() - self.started, 1e-9)
        self.stream.write(f"\rsimulate [{bar:<30}] {share:6.1%} {self.sent}/{self.total} events "
                          f"({rate:,.0f}/s)", ending="")
        self.stream.flush()

    def done(self) -> None:
        if self.stream is not None:
            self.stream.write("")
