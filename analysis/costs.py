"""Token cost: what the LLM steps of a task, a session or a release cost at the prices an
operator entered (`ModelPrice`: the admin or `manage.py load_prices`). docs/export.md, "Cost".

One definition, in SQL, read by every reader (task page, task list, overview, release
comparison, exports): an LLM step (kind `llm`) costs

    (input_tokens × input price + output_tokens × output price) / 1,000,000

at the price of its model in force when the step started (`PRICE_JOIN` picks it); a missing
token count counts as 0 tokens. A step whose model has no price then has no cost (NULL), never
0: sums say how many LLM steps they could not price and which models, and the pages show
"no price" instead of a number that looks complete. Cached input tokens are charged as input
tokens (no cache discount)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.db.models import QuerySet
from django.utils.dateparse import parse_date, parse_datetime

from agentops.db import read_connection
from analysis.filters import TaskFilters, task_queryset
from analysis.models import ModelPrice
from ingest.models import Project, Task
from ingest.services import audit_record

LLM_KIND = "llm"

# Which price a step pays: its model's effective_from instants in order; the step pays price
# number width_bucket(started_at, those instants) (0: it started before the model's first price).
PRICE_BOUNDS_SQL = ("SELECT model, array_agg(effective_from ORDER BY effective_from) AS froms"
                    " FROM analysis_modelprice GROUP BY model")
PRICE_PERIODS_SQL = ("SELECT model, input_per_million, output_per_million,"
                     " row_number() OVER (PARTITION BY model ORDER BY effective_from) AS period"
                     " FROM analysis_modelprice")


def price_period_sql(step: str = "s", bounds: str = "pb") -> str:
    """The number of the price a step pays among its model's prices (1 = the first), 0 for none:
    how many of them took effect at or before the step started. Needs `price_bounds_join`."""
    return f"coalesce(width_bucket({step}.started_at, {bounds}.froms), 0)"


def price_bounds_join(step: str = "s", bounds: str = "pb") -> str:
    return f" LEFT JOIN ({PRICE_BOUNDS_SQL}) {bounds} ON {bounds}.model = {step}.model"


def price_join(step: str = "s", price: str = "p") -> str:
    """LEFT JOINs giving each step of alias `step` the price (alias `price`) of its model in force
    when it started; the price columns are NULL when there is none."""
    bounds = f"{price}_bounds"
    return (price_bounds_join(step, bounds) + f" LEFT JOIN ({PRICE_PERIODS_SQL}) {price}"
            f" ON {price}.model = {step}.model AND {price}.period = {price_period_sql(step, bounds)}")


def tokens_cost_sql(input_tokens: str, output_tokens: str, price: str = "p") -> str:
    """THE cost, in US dollars: input and output tokens at a price (per million tokens);
    NULL without a price. Per step, or per sum of steps that pay the same price."""
    return (f"(({input_tokens})::numeric * {price}.input_per_million"
            f" + ({output_tokens})::numeric * {price}.output_per_million) / 1000000")


def step_cost_sql(step: str = "s", price: str = "p") -> str:
    """The cost (float8) of a step joined with `price_join`: NULL for a step that is not an LLM
    step or whose model has no price; a missing token count counts as 0 tokens."""
    cost = tokens_cost_sql(f"coalesce({step}.input_tokens, 0)", f"coalesce({step}.output_tokens, 0)", price)
    return f"(CASE WHEN {step}.kind = '{LLM_KIND}' THEN {cost} END)::float8"


def step_priced_sql(step: str = "s", price: str = "p") -> str:
    """True for an LLM step with a price, false for one without, NULL for other steps."""
    return f"(CASE WHEN {step}.kind = '{LLM_KIND}' THEN {price}.model IS NOT NULL END)"


def grouped_costs_sql(*, tables: str, where: str, groups: Sequence[str]) -> str:
    """Cost sums of LLM steps per group: `tables` is the FROM clause over steps aliased `s`,
    `where` keeps LLM steps only, `groups` are the grouping expressions (e.g. "t.release"). Tokens are summed per
    (group, model, price) first and priced once per sum, so millions of steps cost a scan and a
    hash aggregate, not a price lookup each. Columns: the groups, then usd (float8, NULL when
    nothing is priced), LLM steps, unpriced steps, unpriced models (text[])."""
    named = [f"{g} AS g{i}" for i, g in enumerate(groups)]
    keys = [f"g{i}" for i in range(len(groups))]
    source = f"FROM {tables}{price_bounds_join()} WHERE {where}"
    inner = (f"SELECT {', '.join([*named, 's.model AS step_model', price_period_sql() + ' AS period'])},"
             f" sum(coalesce(s.input_tokens, 0)) AS inp, sum(coalesce(s.output_tokens, 0)) AS outp, count(*) AS n"
             f" {source} GROUP BY {', '.join([*keys, 'step_model', 'period'])}")
    group_by = f" GROUP BY {', '.join(keys)}" if keys else ""
    return (f"SELECT {''.join(k + ', ' for k in keys)}sum({tokens_cost_sql('c.inp', 'c.outp')})::float8,"
            f" coalesce(sum(c.n), 0)::int8, coalesce(sum(c.n) FILTER (WHERE p.model IS NULL), 0)::int8,"
            f" coalesce(array_agg(c.step_model ORDER BY c.step_model) FILTER (WHERE p.model IS NULL), '{{}}')"
            f" FROM ({inner}) c LEFT JOIN ({PRICE_PERIODS_SQL}) p ON p.model = c.step_model AND p.period = c.period"
            f"{group_by}")


@dataclass(frozen=True)
class Cost:
    """The cost of a set of LLM steps. `usd` sums the priced ones (None when none is priced);
    `unpriced` steps (of `unpriced_models`) are in no sum."""

    usd: float | None = None
    llm_steps: int = 0
    unpriced: int = 0
    unpriced_models: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.unpriced == 0

    @property
    def text(self) -> str:
        """"$0.0123"; "no price" when no LLM step could be priced; "$0.0123 + no price for 2 LLM
        steps" when some could not; "–" when there is no LLM step at all."""
        if not self.llm_steps:
            return "–"
        if self.usd is None:
            return "no price"
        if self.unpriced:
            return f"{format_usd(self.usd)} + no price for {self.unpriced} LLM step{'s' * (self.unpriced > 1)}"
        return format_usd(self.usd)

    @property
    def missing_models(self) -> str:
        """The models with no price, named."""
        return ", ".join(m or "(no model)" for m in self.unpriced_models)

    @property
    def missing_text(self) -> str:
        """Which models have no price, for a tooltip."""
        return f"no price for {self.missing_models}" if self.unpriced_models else ""

    def per(self, n: int) -> float | None:
        """The priced cost divided over n (tasks or steps); None without a cost or n."""
        return self.usd / n if self.usd is not None and n else None


def combined(parts: Iterable[Cost]) -> Cost:
    """One Cost for several disjoint sets of steps (e.g. all releases)."""
    parts = list(parts)
    priced = [p.usd for p in parts if p.usd is not None]
    return Cost(usd=sum(priced) if priced else None, llm_steps=sum(p.llm_steps for p in parts),
                unpriced=sum(p.unpriced for p in parts),
                unpriced_models=tuple(sorted({m for p in parts for m in p.unpriced_models})))


def format_usd(value: float | None) -> str:
    if value is None:
        return "no price"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"${value:,.0f}"
    if magnitude >= 1:
        return f"${value:,.2f}"
    if magnitude == 0:
        return "$0"
    if magnitude < 1e-6:
        return f"${value:.2e}"
    digits = 2 - math.floor(math.log10(magnitude))  # three significant digits
    return f"${value:.{digits}f}"


def _cost(row: Sequence) -> Cost:
    usd, steps, unpriced, models = row
    return Cost(usd=usd if steps and unpriced < steps else None, llm_steps=steps, unpriced=unpriced,
                unpriced_models=tuple(models))


def _fetch(sql: str, params: Sequence) -> list[tuple]:
    with read_connection().cursor() as cur:
        cur.execute(sql, list(params))
        return cur.fetchall()


def task_costs(*, tasks: Iterable[Task]) -> dict[int, Cost]:
    """Cost per task (keyed by the task's pk) of the given tasks (one page of the task list).
    One statement per project of the tasks (one, on a page), naming it: steps are distributed by
    project, and a read of steps by task id alone asks every shard of a Citus cluster."""
    tasks = list(tasks)
    if not tasks:
        return {}
    by_project: dict[int, list[int]] = {}
    for t in tasks:
        by_project.setdefault(t.project_id, []).append(t.pk)
    found = {}
    for project_id, pks in by_project.items():
        rows = _fetch(grouped_costs_sql(tables="ingest_step s", where=f"s.project_id = %s AND s.task_id = ANY(%s)"
                                        f" AND s.kind = '{LLM_KIND}'", groups=["s.task_id"]), [project_id, pks])
        found.update((row[0], _cost(row[1:])) for row in rows)
    return {t.pk: found.get(t.pk, Cost()) for t in tasks}


def task_cost(*, task: Task) -> Cost:
    return task_costs(tasks=[task])[task.pk]


def _tasks_sql(tasks: QuerySet[Task]) -> tuple[str, tuple]:
    sql, params = tasks.values("id").query.sql_with_params()
    return sql, tuple(params)


def tasks_cost(*, project: Project, tasks: QuerySet[Task]) -> Cost:
    """The cost of every LLM step of the given tasks, all of `project`: the steps are named by
    their project as well as by the tasks' query, so a Citus cluster reads them on the project's
    worker (by `IN (tasks)` alone it asks every shard)."""
    sql, params = _tasks_sql(tasks)
    rows = _fetch(grouped_costs_sql(tables="ingest_step s", where=f"s.project_id = %s AND s.task_id IN ({sql})"
                                    f" AND s.kind = '{LLM_KIND}'", groups=[]), [project.pk, *params])
    return _cost(rows[0])


def filtered_cost(*, project: Project, filters: TaskFilters) -> Cost:
    """The cost of the tasks the filters select (the overview)."""
    return tasks_cost(project=project, tasks=task_queryset(project=project, filters=filters))


def session_cost(*, project: Project, session_id: str) -> tuple[int, Cost]:
    """(tasks, cost) of one session: every task of the project with this session id."""
    tasks = Task.objects.filter(project=project, session_id=session_id)
    return tasks.count(), tasks_cost(project=project, tasks=tasks)


def cost_by_release(*, project: Project, filters: TaskFilters) -> dict[str, dict]:
    """Per release of the filtered tasks: tasks, their cost, and the cost per task and per
    priced LLM step (the overview)."""
    out = {}
    for release, (n_tasks, cost) in _fetch_release_sums(task_queryset(project=project, filters=filters)).items():
        out[release] = {"tasks": n_tasks, "cost": cost, "per_task": cost.per(n_tasks),
                        "per_llm_step": cost.per(cost.llm_steps - cost.unpriced)}
    return out


def step_group_costs(*, tasks: QuerySet[Task]) -> dict[tuple[str, str], dict[str, Cost | int]]:
    """Per (release, "llm:<step name>") of the given tasks: the LLM steps' cost and count (the
    release comparison's step rows use the same "kind:name" keys)."""
    sql, params = tasks.values("id", "project_id", "release").query.sql_with_params()
    rows = _fetch(grouped_costs_sql(tables=f"({sql}) t JOIN ingest_step s ON s.task_id = t.id AND s.project_id = t.project_id",
                                    where=f"s.kind = '{LLM_KIND}'", groups=["t.release", "s.name"]), params)
    return {(release, f"{LLM_KIND}:{name or '(unnamed)'}"): {"cost": _cost(rest), "calls": rest[1]}
            for release, name, *rest in rows}


def release_costs(*, tasks: QuerySet[Task], a: str, b: str) -> dict:
    """The cost side of a release comparison: per task and per LLM step for A and B with their
    difference, and per LLM step group (kind:name) the cost per task and per call. `tasks` are
    the compared tasks of both releases."""
    groups = step_group_costs(tasks=tasks)  # one scan: release totals are the sums of their groups
    sql, params = tasks.values("id", "release").query.sql_with_params()
    counts = dict(_fetch(f"SELECT release, count(*) FROM ({sql}) t GROUP BY release", params))
    releases = {name: (n, combined(v["cost"] for (r, _), v in groups.items() if r == name))
                for name, n in counts.items()}
    out: dict = {}
    for side, name in (("a", a), ("b", b)):
        n_tasks, cost = releases.get(name, (0, Cost()))
        out[side] = {"release": name, "tasks": n_tasks, "usd": cost.usd, "llm_steps": cost.llm_steps,
                     "unpriced_llm_steps": cost.unpriced, "unpriced_models": list(cost.unpriced_models),
                     "per_task_usd": cost.per(n_tasks), "per_llm_step_usd": cost.per(cost.llm_steps - cost.unpriced),
                     "text": cost.text}
    out["per_task_delta_usd"] = _delta(out["a"]["per_task_usd"], out["b"]["per_task_usd"])
    out["per_llm_step_delta_usd"] = _delta(out["a"]["per_llm_step_usd"], out["b"]["per_llm_step_usd"])
    out["per_task_delta_pct"] = _pct(out["a"]["per_task_usd"], out["b"]["per_task_usd"])
    out["per_llm_step_delta_pct"] = _pct(out["a"]["per_llm_step_usd"], out["b"]["per_llm_step_usd"])
    steps = []
    for key in sorted({k for (_, k) in groups}):
        row: dict = {"key": key}
        for side, name in (("a", a), ("b", b)):
            found = groups.get((name, key))
            n_tasks = out[side]["tasks"]
            cost = found["cost"] if found else Cost()
            calls = found["calls"] if found else 0
            # a release with tasks but no call of this group spends 0 on it per task
            row[f"per_task_{side}_usd"] = cost.per(n_tasks) if found else (0.0 if n_tasks else None)
            row[f"per_call_{side}_usd"] = cost.per(calls - cost.unpriced) if found else None
            row[f"unpriced_{side}"] = cost.unpriced
        row["per_task_delta_usd"] = _delta(row["per_task_a_usd"], row["per_task_b_usd"])
        row["per_call_delta_usd"] = _delta(row["per_call_a_usd"], row["per_call_b_usd"])
        steps.append(row)
    steps.sort(key=lambda r: (-abs(r["per_task_delta_usd"] or 0), r["key"]))
    out["steps"] = steps
    return out


CACHE_SECONDS = 24 * 3600


def release_costs_cached(*, project: Project, tasks: QuerySet[Task], a: str, b: str, key: object = ()) -> dict:
    """`release_costs`, kept in the cache under the version of what it read: the compared tasks
    (count, newest event) and the whole price table. At millions of steps the sums take seconds
    (docs/scaling.md); asking again while neither changed costs two small queries."""
    import hashlib

    from django.core.cache import cache

    sql, params = tasks.values("id", "last_event_at").query.sql_with_params()
    (count, newest), = _fetch(f"SELECT count(*), max(last_event_at) FROM ({sql}) t", params)
    (prices,), = _fetch("SELECT md5(coalesce(string_agg(concat_ws('|', model, input_per_million, output_per_million,"
                        " effective_from), ',' ORDER BY id), '')) FROM analysis_modelprice", [])
    version = repr((project.pk, a, b, key, count, newest, prices))
    cache_key = "release-costs:" + hashlib.sha256(version.encode()).hexdigest()
    found = cache.get(cache_key)
    if found is None:
        found = release_costs(tasks=tasks, a=a, b=b)
        cache.set(cache_key, found, CACHE_SECONDS)
    return found


def _fetch_release_sums(tasks: QuerySet[Task]) -> dict[str, tuple[int, Cost]]:
    sql, params = tasks.values("id", "project_id", "release").query.sql_with_params()
    counts = dict(_fetch(f"SELECT release, count(*) FROM ({sql}) t GROUP BY release", params))
    rows = _fetch(grouped_costs_sql(tables=f"({sql}) t JOIN ingest_step s ON s.task_id = t.id AND s.project_id = t.project_id",
                                    where=f"s.kind = '{LLM_KIND}'", groups=["t.release"]), params)
    found = {row[0]: _cost(row[1:]) for row in rows}
    return {release: (n, found.get(release, Cost())) for release, n in counts.items()}


def _delta(a: float | None, b: float | None) -> float | None:
    return b - a if a is not None and b is not None else None


def _pct(a: float | None, b: float | None) -> float | None:
    return 100 * (b - a) / a if a and b is not None else None


# --- the price table from a file ----------------------------------------------------------------


class PriceFileError(ValueError):
    pass


PRICE_FIELDS = ("model", "input_per_million", "output_per_million", "effective_from")


@dataclass
class PriceRow:
    model: str
    input_per_million: Decimal
    output_per_million: Decimal
    effective_from: datetime
    note: str = ""
    line: int = 0
    extra: dict = field(default_factory=dict)


def _decimal(value: object, *, where: str, name: str) -> Decimal:
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise PriceFileError(f"{where}: {name}: {value!r} is not a number") from None
    if not number.is_finite() or number < 0:
        raise PriceFileError(f"{where}: {name}: must be a number ≥ 0, got {value!r}")
    if number >= Decimal("1e8"):
        raise PriceFileError(f"{where}: {name}: {value!r} is too large (dollars per million tokens)")
    return number


def _instant(value: object, *, where: str) -> datetime:
    from datetime import UTC
    from datetime import datetime as dt

    text = str(value or "").strip()
    try:
        parsed = parse_datetime(text)
        if parsed is None:
            day = parse_date(text)
            parsed = dt(day.year, day.month, day.day) if day else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise PriceFileError(f"{where}: effective_from: {value!r} is not a date (YYYY-MM-DD) or an"
                             " RFC 3339 timestamp")
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_price_rows(records: Iterable[tuple[int, dict]], *, label: str) -> list[PriceRow]:
    """Validated price rows from (line number, mapping) pairs; PriceFileError names the line and
    the field of the first bad one."""
    out: list[PriceRow] = []
    seen: dict[tuple[str, datetime], int] = {}
    for line, record in records:
        where = f"{label} line {line}"
        if not isinstance(record, dict):
            raise PriceFileError(f"{where}: expected an object with {', '.join(PRICE_FIELDS)}")
        missing = [f for f in PRICE_FIELDS if record.get(f) in (None, "")]
        if missing:
            raise PriceFileError(f"{where}: missing {', '.join(missing)}")
        unknown = sorted(set(record) - set(PRICE_FIELDS) - {"note"})
        if unknown:
            raise PriceFileError(f"{where}: unknown field {', '.join(map(repr, unknown))} (expected "
                                 f"{', '.join(PRICE_FIELDS)}, note)")
        model = str(record["model"]).strip()
        if len(model) > 200 or "\x00" in model:
            raise PriceFileError(f"{where}: model: at most 200 characters, no NUL")
        row = PriceRow(model=model,
                       input_per_million=_decimal(record["input_per_million"], where=where, name="input_per_million"),
                       output_per_million=_decimal(record["output_per_million"], where=where,
                                                   name="output_per_million"),
                       effective_from=_instant(record["effective_from"], where=where),
                       note=str(record.get("note") or "")[:200].replace("\x00", ""), line=line)
        key = (row.model, row.effective_from)
        if key in seen:
            raise PriceFileError(f"{where}: {model!r} from {row.effective_from.isoformat()} is already on line"
                                 f" {seen[key]}")
        seen[key] = line
        out.append(row)
    return out


def read_price_file(path: str) -> list[PriceRow]:
    """Price rows from a CSV file (a header row naming the columns) or a JSON file (a list of
    objects); the format is chosen by the file's extension (.csv, .json)."""
    import csv
    import json
    from pathlib import Path

    file = Path(path)
    label = file.name
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PriceFileError(f"{path}: cannot read it: {exc}") from None
    if file.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PriceFileError(f"{label} line {exc.lineno}: malformed JSON: {exc.msg}") from None
        if not isinstance(data, list):
            raise PriceFileError(f"{label}: expected a JSON list of price objects")
        lines = _json_item_lines(text, len(data))
        return parse_price_rows(zip(lines, data, strict=True), label=label)
    if file.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        header = reader.fieldnames or []
        missing = [f for f in PRICE_FIELDS if f not in header]
        if missing:
            raise PriceFileError(f"{label} line 1: the header lacks {', '.join(missing)}")
        records = []
        for record in reader:
            if None in record:
                raise PriceFileError(f"{label} line {reader.line_num}: more cells than the header has")
            records.append((reader.line_num, record))
        return parse_price_rows(records, label=label)
    raise PriceFileError(f"{path}: expected a .csv or .json file")


def _json_item_lines(text: str, count: int) -> list[int]:
    """The line each top-level object of a JSON list starts on (for error messages)."""
    lines, depth, line, in_string, escaped = [], 0, 1, False, False
    for ch in text:
        if ch == "\n":
            line += 1
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth == 2:
                lines.append(line)
        elif ch in "]}":
            depth -= 1
    lines += [line] * (count - len(lines))
    return lines[:count]


def prices_load(*, rows: Sequence[PriceRow], actor=None) -> tuple[int, int]:
    """Store the rows: a (model, effective_from) already in the table gets the file's prices.
    Returns (created, updated). All or nothing; one audit entry for the load."""
    created = updated = 0
    with transaction.atomic():
        for row in rows:
            _, made = ModelPrice.objects.update_or_create(
                model=row.model, effective_from=row.effective_from,
                defaults={"input_per_million": row.input_per_million,
                          "output_per_million": row.output_per_million, "note": row.note})
            created += made
            updated += not made
        audit_record(actor=actor, project=None, action="price.load", target=f"{len(rows)} prices",
                     details={"created": created, "updated": updated,
                              "models": sorted({r.model for r in rows})[:50]})
    return created, updated


# A price as stored: the fields a price file must carry, and its note.
PRICE_COLUMNS = (*PRICE_FIELDS, "note")


def _price_details(price: ModelPrice) -> dict:
    return {name: (value.isoformat() if isinstance(value, datetime) else str(value))
            for name in PRICE_COLUMNS if (value := getattr(price, name)) is not None}


def price_save(*, price: ModelPrice, values: dict, actor=None) -> ModelPrice:
    """Add a price (`price` a new ModelPrice()) or change one, with `values` already validated
    (the settings page's form and the admin's validate them as the model does); audited. Prices
    apply to every project."""
    with transaction.atomic():
        # From the row as stored: a form may already have written the new values on `price`.
        stored = ModelPrice.objects.filter(pk=price.pk).first() if price.pk else None
        before = _price_details(stored) if stored is not None else None
        for name in PRICE_COLUMNS:
            setattr(price, name, values[name])
        price.save()
        price.refresh_from_db()  # the decimals as stored, not as typed
        details = after = _price_details(price)
        if before is not None:  # what changed, and the instant that names the price
            details = {"effective_from": after["effective_from"]} | {
                name: {"before": before.get(name, ""), "after": value}
                for name, value in after.items() if before.get(name) != value}
        audit_record(actor=actor, project=None, action="price.edit" if before else "price.add",
                     target=price.model, details=details)
    return price


def price_delete(*, price: ModelPrice, actor=None) -> None:
    with transaction.atomic():
        details = _price_details(price)
        price.delete()
        audit_record(actor=actor, project=None, action="price.delete", target=details["model"], details=details)
