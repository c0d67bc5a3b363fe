"""The trace data model: projects and their keys, releases, tasks, steps, devices and samples.

Only ingest writes these tables. Indexes follow the queries the product runs:
- tasks of a project by time (list pages, cursor pagination on (started_at, id)), by release,
  by name; BRIN would do for append-mostly time columns at scale, but the B-tree on
  (project, started_at) also serves keyset pagination and range filters.
- steps by task (the waterfall, the analysis) and by (project, kind, name/model) with time for
  percentiles; BRIN on started_at keeps time-range scans cheap for tens of millions of rows
  at a fraction of a B-tree's size.
- samples by (project, device, ts) for the device lane and hardware correlation.
- search (migrations 0007-0008, raw SQL on the partitioned steps): a GIN index on
  STEP_SEARCH_TSVECTOR (words of a step's error and of its tool arguments' keys and values), a
  GIN jsonb_path_ops index on step attributes (`attr=key:value`) and a B-tree on (project,
  duration) for "a step over N ms"; tasks by (project, session).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.utils import timezone

from ingest import records


class Project(models.Model):
    name = models.CharField(max_length=100, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="projects",
                                     through="ProjectMembership")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ProjectMembership(models.Model):
    """A user's role in a project. A member sees the project's pages; an admin also manages its
    keys and members in the settings pages. A superuser is an admin of every project."""

    ROLE_ADMIN = "admin"
    ROLE_MEMBER = "member"
    ROLES = [ROLE_ADMIN, ROLE_MEMBER]

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=[(r, r) for r in ROLES], default=ROLE_MEMBER)
    added_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="membership_unique_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"


class AuditEntry(models.Model):
    """One change to who may do what: a key created or revoked, a member added, re-roled or
    removed, a price added or changed. `project` is empty for installation-wide changes (prices).
    `details` never holds a secret. Deleting a project deletes its trail with its data."""

    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    # The username at the time (kept when the user is deleted), or "command line".
    actor_name = models.CharField(max_length=150)
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    action = models.CharField(max_length=32)
    target = models.CharField(max_length=300, blank=True, default="")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["project", "-at", "-id"], name="audit_project_time")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.target}"


class IngestKey(models.Model):
    """An API key. Only a SHA-256 of the secret is stored; the prefix finds the row."""

    SCOPE_INGEST = "ingest"
    SCOPE_READ = "read"
    SCOPE_ADMIN = "admin"
    SCOPES = [SCOPE_INGEST, SCOPE_READ, SCOPE_ADMIN]

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    scopes = ArrayField(models.CharField(max_length=16), default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.project.name}:{self.prefix} ({','.join(self.scopes)})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class ProjectRow(models.Model):
    """A row of a table distributed by project (ingest/distribution.py). It never moves to another
    project, so a save() that updates it names the project in its WHERE and leaves project_id out
    of its SET: Citus refuses an UPDATE that sets the distribution column, even to the value it
    has, and routes one that names it to the one worker holding the row; on a single PostgreSQL
    it is the same row either way."""

    class Meta:
        abstract = True

    @classmethod
    def from_db(cls, db, field_names, values):
        row = super().from_db(db, field_names, values)
        row._stored_project_id = row.__dict__.get("project_id")
        return row

    def _do_update(self, base_qs, using, pk_val, values, *args, **kwargs):
        stored = getattr(self, "_stored_project_id", None)
        if stored is not None and stored != self.project_id:
            raise ValueError(f"{self._meta.label} {pk_val} belongs to project {stored}: a row stays in its project")
        values = [value for value in values if value[0].attname != "project_id"]
        return super()._do_update(base_qs.filter(project_id=self.project_id), using, pk_val, values, *args, **kwargs)


class Release(ProjectRow):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="releases")
    name = models.CharField(max_length=200)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="release_unique_name")]

    def __str__(self) -> str:
        return self.name


class _JoinsOnTheProject:
    """A relation to a task whose every join also equates project_id, so that a query of one
    project's steps, findings or analyses joined to their tasks stays on one Citus shard (a join
    of distributed tables must equate the distribution column). The database constraint is
    (task_id, project_id) → ingest_task (id, project_id) since ingest 0018; on a single
    PostgreSQL the extra equality is true of every row and costs nothing. The migrations see the
    plain Django field."""

    def get_extra_restriction(self, alias, related_alias):
        # Called with (the task's alias, the alias of the table holding the key), both ways; an
        # exclude() subquery passes no task alias: its join stays the plain one.
        if alias is None or related_alias is None:
            return None
        from django.db.models.lookups import Exact

        return Exact(self.remote_field.model._meta.get_field("project").get_col(alias),
                     self.model._meta.get_field("project").get_col(related_alias))

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()
        return name, self.plain_path, args, kwargs


class TaskForeignKey(_JoinsOnTheProject, models.ForeignKey):
    plain_path = "django.db.models.ForeignKey"


class TaskOneToOneField(_JoinsOnTheProject, models.OneToOneField):
    plain_path = "django.db.models.OneToOneField"


class Task(ProjectRow):
    """One agent run. `reported` is true once a task event (or an OTLP root span) arrived;
    until then name and bounds are derived from the steps."""

    STATUS_OK, STATUS_ERROR, STATUS_TIMEOUT = records.STATUSES
    # Statuses are defined with the records (ingest/records.py), which the decoders check without Django.
    STATUSES = records.STATUSES
    FAILED_STATUSES = records.FAILED_STATUSES

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tasks")
    task_id = models.CharField(max_length=128)
    name = models.CharField(max_length=200, blank=True, default="")
    # False while the name is derived (from the first agent step, else the service): it is
    # derived again as steps arrive. See TaskRecord.name_given.
    name_given = models.BooleanField(default=False, db_default=False)
    release = models.CharField(max_length=200, blank=True, default="")
    environment = models.CharField(max_length=100, blank=True, default="")
    session_id = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(null=True)
    ended_at = models.DateTimeField(null=True)
    duration_ms = models.FloatField(null=True)
    status = models.CharField(max_length=16, blank=True, default="")
    attributes = models.JSONField(default=dict, blank=True)
    reported = models.BooleanField(default=False)
    step_count = models.IntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    error_count = models.IntegerField(default=0)
    # Set by every event that touches the task; the analysis sweep reads it.
    last_event_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "task_id"], name="task_unique_id")]
        indexes = [
            models.Index(fields=["project", "-started_at", "-id"], name="task_project_time"),
            models.Index(fields=["project", "release", "-started_at"], name="task_project_release"),
            models.Index(fields=["project", "name", "-started_at"], name="task_project_name"),
            # The task list sorted by duration ("slowest first"), keyset-paginated like by time.
            models.Index(fields=["project", "-duration_ms", "-id"], name="task_project_duration"),
            models.Index(fields=["last_event_at"], name="task_last_event"),
            # Sessions: the tasks of one session, and the session list's grouping (an index-only
            # scan: the list aggregates duration and status without reading the table).
            models.Index(fields=["project", "session_id", "started_at"], name="task_session_covering",
                         include=["duration_ms", "status"], condition=~models.Q(session_id="")),
        ]

    def __str__(self) -> str:
        return f"{self.name or self.task_id}"


# The words of a step that free-text search matches: its error and its tool arguments as JSON
# text (keys, strings, numbers). The index in migration 0007 is on exactly this expression, and a
# query must repeat it verbatim for Postgres to use it. 'simple': lower case, no stemming and no
# stop words, so ids, codes and other languages are found as written. < and > become spaces:
# Postgres' parser reads <...> as markup and would drop the words inside a <script> element.
STEP_SEARCH_TSVECTOR = (
    "to_tsvector('simple'::regconfig, translate(error || ' ' || coalesce(tool_args::text, ''), '<>', '  '))")


class Step(ProjectRow):
    """One unit of work in a task. In the database the table is partitioned by week of
    `started_at` (see ingest/partitions.py): its primary key is (id, started_at, project_id) and
    its unique key (task, step_id, started_at, project_id) (ingest 0018, for Citus); Django sees
    `id` as the key, which stays unique."""

    KINDS = ["llm", "tool", "retrieval", "agent", "framework", "queue", "other"]

    # No single-column FK indexes: (task, step_id, started_at) serves "steps of a task" and the
    # (project, …) indexes serve everything else; two more B-trees would only slow ingest.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    task = TaskForeignKey(Task, on_delete=models.CASCADE, related_name="steps", db_index=False)
    step_id = models.CharField(max_length=128)
    parent_step_id = models.CharField(max_length=128, blank=True, default="")
    kind = models.CharField(max_length=16, default="other")
    name = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    duration_ms = models.FloatField()
    status = models.CharField(max_length=16, blank=True, default="ok")
    error = models.TextField(blank=True, default="")
    depends_on = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    attributes = models.JSONField(default=dict, blank=True)
    events = models.JSONField(default=list, blank=True)
    # llm
    model = models.CharField(max_length=200, blank=True, default="")
    provider = models.CharField(max_length=100, blank=True, default="")
    device = models.CharField(max_length=200, blank=True, default="")
    input_tokens = models.IntegerField(null=True)
    output_tokens = models.IntegerField(null=True)
    cached_tokens = models.IntegerField(null=True)
    ttft_ms = models.FloatField(null=True)
    streamed = models.BooleanField(null=True)
    # tool
    tool_name = models.CharField(max_length=200, blank=True, default="")
    tool_args = models.JSONField(null=True, blank=True)
    tool_result = models.TextField(blank=True, default="")
    tool_call_id = models.CharField(max_length=128, blank=True, default="")
    # llm: the tool calls this response requested (their ids).
    tool_call_ids = ArrayField(models.CharField(max_length=128), default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "step_id"], name="step_unique_id")]
        indexes = [
            models.Index(fields=["project", "kind", "name", "started_at"], name="step_kind_name_time"),
            models.Index(fields=["project", "model", "started_at"], name="step_model_time",
                         condition=~models.Q(model="")),
            models.Index(fields=["project", "device", "started_at"], name="step_device_time",
                         condition=~models.Q(device="")),
            BrinIndex(fields=["started_at"], name="step_started_brin"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


class Device(ProjectRow):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="devices")
    name = models.CharField(max_length=200)
    vendor = models.CharField(max_length=50, blank=True, default="")
    hardware = models.CharField(max_length=100, blank=True, default="")
    # Where it sits (docs/otlp.md, "Which server and GPU served a call"): the host a GPU reports
    # from or a server listens on, and "gpu" | "server" ("" when only steps named it).
    host = models.CharField(max_length=200, blank=True, default="", db_default="")
    role = models.CharField(max_length=16, blank=True, default="", db_default="")
    # The host set by hand (admin) where a server's address and its GPUs' host differ (a load
    # balancer, `localhost`): the exporters' host no longer replaces it.
    host_by_hand = models.BooleanField(default=False, db_default=False)
    # Whose it is beyond its host (ingest.conventions.device_labels): a server's pod, namespace
    # and workload; a GPU's pod, namespace, container and index, and the server whose own spans
    # name it (`agentops.server`). Merged as they arrive.
    labels = models.JSONField(default=dict, blank=True, db_default={})
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="device_unique_name")]

    def __str__(self) -> str:
        return self.name


class ResourceSample(ProjectRow):
    """One telemetry reading of a device. Known metrics get columns (the analysis filters and
    aggregates them); anything else stays in `extra`. Partitioned by week of `ts`."""

    METRICS = [
        "utilization", "queue_depth", "batch_size", "power_w", "temperature_c",
        "mem_bw_util", "kv_cache_hit_rate", "tokens_per_s", "throttled",
        "sm_clock_mhz", "sm_clock_max_mhz", "clock_reasons", "kv_cache_usage", "preemptions",
    ]

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    device = models.CharField(max_length=200)
    ts = models.DateTimeField()
    utilization = models.FloatField(null=True)
    queue_depth = models.FloatField(null=True)
    batch_size = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    temperature_c = models.FloatField(null=True)
    mem_bw_util = models.FloatField(null=True)
    kv_cache_hit_rate = models.FloatField(null=True)
    tokens_per_s = models.FloatField(null=True)
    throttled = models.FloatField(null=True)
    # DCGM: SM clock and its maximum (MHz), the clock-event reasons bitmask. Inference servers:
    # KV-cache usage (0..1) and the preemptions counter (cumulative).
    sm_clock_mhz = models.FloatField(null=True)
    sm_clock_max_mhz = models.FloatField(null=True)
    clock_reasons = models.FloatField(null=True)
    kv_cache_usage = models.FloatField(null=True)
    preemptions = models.FloatField(null=True)
    extra = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "device", "ts"], name="sample_unique_device_ts")
        ]

    def __str__(self) -> str:
        return f"{self.device}@{self.ts}"


class LatencyHistogram(ProjectRow):
    """A GenAI latency histogram point from /v1/metrics (e.g. gen_ai.server.time_to_first_token),
    kept per model as an aggregate: explicit bucket bounds (seconds) and counts."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    metric = models.CharField(max_length=200)
    model = models.CharField(max_length=200, blank=True, default="")
    device = models.CharField(max_length=200, blank=True, default="")
    start = models.DateTimeField(null=True)
    ts = models.DateTimeField()
    count = models.BigIntegerField()
    sum = models.FloatField(null=True)
    bounds = ArrayField(models.FloatField(), default=list)
    counts = ArrayField(models.BigIntegerField(), default=list)
    attributes = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "metric", "model", "device", "ts"],
                                    name="histogram_unique_point")
        ]


class InstrumentationCount(ProjectRow):
    """Spans of one hour, service, instrumentation scope, release, environment and step kind, and
    how many of them carried each field the analysis reads (ingest/instrumentation.py `FIELDS`),
    added up at ingest. The Instrumentation page reads these, never the steps: a week is a few
    thousand rows whatever the number of steps behind them."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    hour = models.DateTimeField()
    service = models.CharField(max_length=200, blank=True, default="")
    scope_name = models.CharField(max_length=200, blank=True, default="")
    scope_version = models.CharField(max_length=200, blank=True, default="")
    sdk_name = models.CharField(max_length=200, blank=True, default="")
    sdk_language = models.CharField(max_length=200, blank=True, default="")
    sdk_version = models.CharField(max_length=200, blank=True, default="")
    release = models.CharField(max_length=200, blank=True, default="")
    environment = models.CharField(max_length=100, blank=True, default="")
    kind = models.CharField(max_length=16)
    spans = models.BigIntegerField(default=0)
    model = models.BigIntegerField(default=0)
    tokens = models.BigIntegerField(default=0)
    ttft = models.BigIntegerField(default=0)
    responses = models.BigIntegerField(default=0)
    call_ids = models.BigIntegerField(default=0)
    server_address = models.BigIntegerField(default=0)
    device = models.BigIntegerField(default=0)
    serving = models.BigIntegerField(default=0)
    tool_name = models.BigIntegerField(default=0)
    tool_args = models.BigIntegerField(default=0)
    args_redacted = models.BigIntegerField(default=0)
    tool_result = models.BigIntegerField(default=0)
    result_redacted = models.BigIntegerField(default=0)
    tool_call_id = models.BigIntegerField(default=0)
    session = models.BigIntegerField(default=0)
    ai_sdk_shape = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["project", "hour", "service", "scope_name", "scope_version", "sdk_name", "sdk_language",
                    "sdk_version", "release", "environment", "kind"], name="instrumentation_count_key")]

    def __str__(self) -> str:
        return f"{self.service}/{self.scope_name}@{self.hour:%Y-%m-%d %H}h {self.kind}"
