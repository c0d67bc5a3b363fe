"""What the analysis derives from a task: its findings and its analysis (critical path, latency
budget, what-if), plus the baselines the detectors compare against. Re-analysis replaces a
task's rows; nothing here is appended twice."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from ingest.models import Project, ProjectRow, Task, TaskForeignKey, TaskOneToOneField

# A finding's confidence (docs/analysis.md, "Confidence"): a low one is shown but counted nowhere. The
# detectors (analysis/engine/detectors/base.py) take these names from here.
CONFIDENCE_HIGH, CONFIDENCE_MEDIUM, CONFIDENCE_LOW = "high", "medium", "low"


class TaskAnalysis(ProjectRow):
    """One row per analysed task. `analyzed_through` is the task's last_event_at the analysis
    saw: a task is due again when new events arrive after it. `claimed_until` lets one worker
    claim the task with a conditional UPDATE."""

    task = TaskOneToOneField(Task, on_delete=models.CASCADE, primary_key=True, related_name="analysis")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    analyzed_at = models.DateTimeField(null=True)
    analyzed_through = models.DateTimeField(null=True)
    claimed_until = models.DateTimeField(null=True)
    claim_token = models.CharField(max_length=32, blank=True, default="")
    critical_path = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    budget = models.JSONField(default=dict, blank=True)
    whatif = models.JSONField(default=dict, blank=True)
    wasted_ms = models.FloatField(default=0)
    top_finding = models.CharField(max_length=40, blank=True, default="")
    finding_kinds = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    # Set when the task was too large to analyse fully (analysis/engine/batch.py, HUGE_TASK_STEPS):
    # {"reason": "too_large", "steps", "analysed_steps", "limit", "analysed_until"}; null otherwise.
    limited = models.JSONField(null=True, blank=True, default=None)

    class Meta:
        indexes = [models.Index(fields=["project", "top_finding"], name="analysis_top_finding")]

    @property
    def limited_note(self) -> str:
        """What the task page and the API say of an analysis that did not cover the whole task."""
        if not self.limited:
            return ""
        steps, done = self.limited.get("steps"), self.limited.get("analysed_steps")
        return (f"Too large to analyse fully: this task has {steps:,} steps, more than the {self.limited.get('limit'):,}"
                f" analysed in full. Its findings, critical path and budget cover its first {done:,} steps,"
                f" until {self.limited.get('analysed_until')}.")


class FindingQuerySet(models.QuerySet):
    def counted(self) -> FindingQuerySet:
        """The findings that count in wasted-time totals, top findings and finding alerts: all
        but the low-confidence ones. Readers that write SQL use COUNTED_FINDING_SQL below."""
        return self.exclude(confidence=Finding.CONFIDENCE_LOW)


class Finding(ProjectRow):
    SEVERITIES = ["low", "medium", "high"]
    # How sure the detector is (docs/analysis.md, "Confidence"). A low-confidence finding is
    # shown, dimmed, but counts in no wasted-time total, top finding or wasted-time alert.
    CONFIDENCE_HIGH, CONFIDENCE_MEDIUM, CONFIDENCE_LOW = CONFIDENCE_HIGH, CONFIDENCE_MEDIUM, CONFIDENCE_LOW
    CONFIDENCES = [CONFIDENCE_LOW, CONFIDENCE_MEDIUM, CONFIDENCE_HIGH]

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    task = TaskForeignKey(Task, on_delete=models.CASCADE, related_name="findings")
    kind = models.CharField(max_length=40)
    step_ids = ArrayField(models.CharField(max_length=128), default=list)
    wasted_ms = models.FloatField()
    severity = models.CharField(max_length=10, default="medium")
    summary = models.TextField()
    evidence = models.JSONField(default=dict, blank=True)
    confidence = models.CharField(max_length=8, default=CONFIDENCE_HIGH, db_default=CONFIDENCE_HIGH)
    # One line on what the confidence rests on (and, when not high, why we are not sure).
    confidence_reason = models.TextField(blank=True, default="", db_default="")
    # Denormalised from the task so finding lists filter by time and release without a join.
    task_started_at = models.DateTimeField(null=True)
    release = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = FindingQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["project", "kind", "-task_started_at"], name="finding_kind_time"),
            models.Index(fields=["project", "-task_started_at"], name="finding_time"),
            models.Index(fields=["task"], name="finding_task"),
        ]

    @property
    def is_counted(self) -> bool:
        """Whether this finding counts in totals (FindingQuerySet.counted, for one row)."""
        return self.confidence != self.CONFIDENCE_LOW


# FindingQuerySet.counted as a condition on analysis_finding's columns, for raw SQL readers.
COUNTED_FINDING_SQL = f"confidence <> '{Finding.CONFIDENCE_LOW}'"


class Baseline(ProjectRow):
    """Robust statistics of step durations per (project, kind, key [, device]) over a trailing
    window. `key` is the step name, tool name or model depending on the kind."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16)
    key = models.CharField(max_length=200)
    device = models.CharField(max_length=200, blank=True, default="")
    count = models.IntegerField(default=0)
    median_ms = models.FloatField(null=True)
    mad_ms = models.FloatField(null=True)
    p90_ms = models.FloatField(null=True)
    p99_ms = models.FloatField(null=True)
    stats = models.JSONField(default=dict, blank=True)
    window_start = models.DateTimeField(null=True)
    window_end = models.DateTimeField(null=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "kind", "key", "device"], name="baseline_unique")
        ]


class ModelPrice(models.Model):
    """What one model's tokens cost from `effective_from` until the model's next price (US
    dollars per million tokens). Entered by an operator (the admin or `manage.py load_prices`):
    none is built in, because a shipped price would be out of date without saying so. A step is
    priced at the price in force when it started (analysis/costs.py)."""

    model = models.CharField(max_length=200, help_text="as steps report it (gen_ai.request.model)")
    input_per_million = models.DecimalField(max_digits=14, decimal_places=6,
                                            help_text="US dollars per million input tokens")
    output_per_million = models.DecimalField(max_digits=14, decimal_places=6,
                                             help_text="US dollars per million output tokens")
    effective_from = models.DateTimeField(help_text="the first instant this price applies (UTC)")
    note = models.CharField(max_length=200, blank=True, default="", help_text="where the price comes from")

    class Meta:
        ordering = ["model", "-effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["model", "effective_from"], name="modelprice_unique_from"),
            models.CheckConstraint(condition=models.Q(input_per_million__gte=0, output_per_million__gte=0),
                                   name="modelprice_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.model} from {self.effective_from:%Y-%m-%d}"


class AgentProfile(ProjectRow):
    """What one agent's recent runs say about the values its calls pass (analysis/engine/learned.py):
    how many runs the profile was learned from and the tokens common across them (a token in
    most runs, such as a region or the tenant's name, is no evidence that one call fed
    another). `agent` "" is the whole project's recent traffic, the cold-start reference."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    agent = models.CharField(max_length=200, blank=True, default="")  # the task name
    release = models.CharField(max_length=200, blank=True, default="")
    runs = models.IntegerField(default=0)
    common_tokens = ArrayField(models.TextField(), default=list, blank=True)
    # The newest task end the profile has seen: refreshed again once a later one exists.
    through = models.DateTimeField(null=True)
    refreshed_at = models.DateTimeField(auto_now=True)
    refresh_ms = models.FloatField(default=0.0)  # what the last refresh cost

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "agent", "release"], name="agentprofile_unique")]


class CallPair(ProjectRow):
    """One ordered pair of calls of an agent's turns, with the evidence its recent runs gave: in
    how many runs both ran, a value of the earlier one's result reached the later one's
    arguments (`flow_runs`), they overlapped in time, one model response requested both, and
    how many distinct results the earlier call returned. A call is named by its tool and its
    position among that tool's calls in the turn (`search#0`, `search#1`)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    agent = models.CharField(max_length=200)
    release = models.CharField(max_length=200, blank=True, default="")
    earlier = models.CharField(max_length=210)
    later = models.CharField(max_length=210)
    runs = models.IntegerField(default=0)
    flow_runs = models.IntegerField(default=0)
    # Runs where only values common to the agent's runs linked the earlier result to the later
    # arguments: a value passed on in every run looks like coincidence, so no flow can be read.
    blind_runs = models.IntegerField(default=0)
    concurrent_runs = models.IntegerField(default=0)
    together_runs = models.IntegerField(default=0)
    result_variants = models.IntegerField(default=0)
    serial_ms = models.FloatField(default=0.0)  # mean time the later call waited after the earlier one began
    verdict = models.CharField(max_length=12, default="unknown")  # dependent | independent | unknown
    basis = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "agent", "release", "earlier", "later"],
                                               name="callpair_unique")]


class JobFailure(models.Model):
    """A periodic job's part for one project that failed (analysis/jobs.py): how many times in a
    row, when, the last error, and when it is tried again. Shown in /api/v1/status; deleted when
    the part succeeds. No foreign key: a coordinator-local table under Citus (docs/scaling.md),
    and a deleted project's rows go with it (`analysis.apps`)."""

    job = models.CharField(max_length=50)
    project_id = models.BigIntegerField()
    failures = models.IntegerField(default=0)
    first_error_at = models.DateTimeField()
    last_error_at = models.DateTimeField()
    last_error = models.TextField(blank=True, default="")
    retry_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "project_id"], name="jobfailure_unique_job_project")]

    def __str__(self) -> str:
        return f"{self.job} of project {self.project_id}: {self.failures} failures"
