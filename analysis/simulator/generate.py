"""Generate a workload: ReAct-style agent tasks, device telemetry and the ground truth of the
problems injected into them. Pure: no Django, no I/O; the same seed gives the same output.

How it runs, in four phases (each drawing from its own seeded generator, so changing one task
never reshuffles another):
1. Arrivals: sessions of 1–4 tasks spread over [start, end] with a diurnal rhythm; each task
   gets an agent, a release (releases roll out one after another over the period, with a
   short canary overlap), a device, and — with probability `anomaly_rate` — one or two
   injected problem kinds.
2. Fault windows: a task chosen for `hardware_queueing`/`hardware_throttling` opens a
   window of 2–5 minutes on its device around its start. Every LLM step of *any* task on that
   device inside the window is slowed, and labelled.
3. Tasks: a plan (turns, tool calls, arguments, token counts) is drawn, the chosen problems
   are applied to the plan, then it is laid out in time: LLM turn → tool calls → LLM turn…
   How dependencies show depends on `dependencies`: "declared" (each turn of a chain agent
   runs its calls one after another, and every step lists what it consumed in `depends_on`)
   or "evidence", the default (evidence.py wires the plan first: calls get results, dependent
   calls quote earlier results, agent code chains follow-ups; steps carry call ids and results
   and never `depends_on`, and the calls of one response run concurrently).
4. Telemetry: each device's readings, consistent with the LLM steps it served and its
   windows (see devices.py).

Releases (by position, whatever their names): the first is the baseline; from the second on
a result cache makes cacheable tools 25 % faster, prompts reuse the cached system prefix,
and repeated tool calls become rarer; the third regresses one tool (`search_inventory`, 2×
slower on every call) — a release-comparison effect, not a per-task label.

Labels say what was injected and never reach the product: they are returned separately and
written to a file by the command.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from analysis.simulator.calls import Call, Turn, asked_again, one_changed, request_key, unique_args
from analysis.simulator.catalog import (
    AGENTS,
    CACHE_SPEEDUP,
    REGRESSED_TOOL,
    REGRESSION_FACTOR,
    Agent,
    Tool,
    short_id,
)
from analysis.simulator.devices import (
    THROTTLE_REASONS,
    SimDevice,
    Window,
    device_readings,
    make_devices,
    otlp_metrics,
    otlp_point_count,
)
from analysis.simulator.evidence import result_text, wire

KINDS = ("slow_step", "repeated_tool_call", "serial_gap", "parallelizable_calls", "context_growth",
         "hardware_queueing", "hardware_throttling", "hardware_kv_cache_pressure")
HARDWARE_KINDS = ("hardware_queueing", "hardware_throttling", "hardware_kv_cache_pressure")
KIND_WEIGHTS = {"slow_step": 0.22, "repeated_tool_call": 0.18, "serial_gap": 0.16,
                "parallelizable_calls": 0.14, "context_growth": 0.12, "hardware_queueing": 0.09,
                "hardware_throttling": 0.09, "hardware_kv_cache_pressure": 0.07}
VERDICTS = {"hardware_queueing": "queueing", "hardware_throttling": "throttling",
            "hardware_kv_cache_pressure": "kv_cache_pressure"}

# Injected magnitudes, chosen to sit well clear of normal variation (see docs/simulator.md).
SLOW_FACTOR = (6.0, 12.0)          # × the tool's median; normal p99.99 is ≤ 4.4×
GAP_MS = (1500.0, 6000.0)          # idle stall; normal gaps are 3–100 ms
GROWTH_RESULT_TOKENS = (1500, 5000)  # raw tool output appended each turn; normal is 40–200
QUEUE_EXTRA_TTFT_MS = (1200.0, 3000.0)
WINDOW_S = (120.0, 300.0)
THROTTLE_CLOCK_SHARE = (0.45, 0.65)  # of max SM clock while a GPU throttles
# KV-cache incident: a call is preempted (evicted mid-decode, re-admitted, its prefix recomputed)
# with this probability, and waits this long to be re-admitted.
KV_PREEMPT_SHARE = 0.7
KV_REQUEUE_MS = (600.0, 2500.0)
# Share of tasks whose client propagates trace context to vLLM, so that the server's own
# `llm_request` span arrives as a child of the client's chat span.
SERVER_SPAN_RATE = 0.5
# A step inside a fault window is labelled when the fault added at least 20 % to it and more
# than timer/network jitter (20 ms): every step a device incident slowed materially belongs
# to the incident, even a 90 ms answer that took 140. Below that, nobody could tell.
HW_MIN_EXTRA_MS = 20.0
HW_MIN_EXTRA_RATIO = 0.2
PARALLEL_MIN_WASTE_MS = 150.0  # expected sum − max of an injected serial group
PARTIAL_STAGGER = (0.5, 0.95)  # a partly serialised turn: share of a call done when the next starts
NEAR_REPEAT_RATE = 0.15  # tasks where a later turn asks an earlier tool again, one argument changed
RETRY_SHARE = 0.6  # failed calls agent code sends again with the same arguments
ERROR_RATE = 0.012
TIMEOUT_RATE = 0.004
# Evidence mode: share of tasks whose LLM steps do not report the calls their response
# requested (instrumentations that do not capture output messages; in OpenTelemetry's GenAI
# conventions message content is opt-in). Their tool steps still carry call ids and results.
UNREPORTED_CALL_IDS_RATE = 0.25
DEPENDENCY_MODES = ("evidence", "declared")

_ERRORS = ["HTTP 503 from upstream: service unavailable", "HTTP 429 from upstream: rate limited",
           "ValidationError: field 'id' not found", "ConnectionResetError: peer closed connection"]


@dataclass(frozen=True)
class SimulationConfig:
    tasks: int
    start_ms: float
    end_ms: float
    seed: int = 0
    releases: tuple[str, ...] = ("v1", "v2", "v3")
    devices: tuple[tuple[str, int], ...] = (("gpu", 2), ("dmatrix", 2), ("groq", 2))
    anomaly_rate: float = 0.15
    environment: str = "production"
    # "evidence": dependencies show only through results and call ids, as real agents show
    # them (evidence.py); "declared": every step says what it consumed in `depends_on`.
    dependencies: str = "evidence"


@dataclass
class Simulation:
    tasks: list[list[dict]]  # per task: its task event then its step events
    # Device telemetry: ExportMetricsServiceRequest bodies (OTLP JSON), as /v1/metrics takes them.
    metrics: list[dict]
    labels: list[dict]
    step_count: int = 0
    # Evidence mode's ground truth, like the labels never sent: per task, {step id: the step
    # ids whose results its arguments quote}.
    dependencies: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # The inference servers' own `llm_request` spans (OTLP JSON resourceSpans), children of the
    # client's chat steps of tasks whose client propagates trace context.
    server_spans: list[dict] = field(default_factory=list)

    def events(self, *, chunk: int):
        """What a sender sends, in order: native task and step events in batches of about
        `chunk` (a task and its steps stay together), each followed by the servers' spans of
        those tasks (as the inference servers export them while the tasks run, not hours later:
        a span arriving after its task was analysed would make it due again), then the telemetry
        as `metrics` holds it. OTLP requests are yielded as {"otlp": "traces" | "metrics",
        "body": <OTLP JSON>}."""
        by_trace: dict[str, list[dict]] = {}
        for resource_spans in self.server_spans:
            trace = resource_spans["scopeSpans"][0]["spans"][0]["traceId"]
            by_trace.setdefault(trace, []).append(resource_spans)

        def with_spans(batch: list[dict]):
            yield batch
            spans = [rs for e in batch if e.get("type") == "task" for rs in by_trace.get(e["task_id"], ())]
            if spans:
                yield {"otlp": "traces", "body": {"resourceSpans": spans}}

        batch: list[dict] = []
        for task_events in self.tasks:
            if batch and len(batch) + len(task_events) > chunk:
                yield from with_spans(batch)
                batch = []
            batch.extend(task_events)
        if batch:
            yield from with_spans(batch)
        for body in self.metrics:
            yield {"otlp": "metrics", "body": body}

    @property
    def sample_count(self) -> int:
        """Data points of device telemetry."""
        return sum(otlp_point_count(body) for body in self.metrics)

    @property
    def event_count(self) -> int:
        return sum(len(t) for t in self.tasks) + len(self.server_spans) + self.sample_count

    def label_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(KINDS, 0)
        for label in self.labels:
            counts[label["kind"]] += 1
        return counts


# --- plans -----------------------------------------------------------------------------------


@dataclass
class Arrival:
    index: int
    start_ms: float
    agent: Agent
    release_index: int
    device: SimDevice
    session_id: str
    kinds: tuple[str, ...]


def _hex(*parts: object, n: int) -> str:
    return hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=n // 2).hexdigest()


def _plan(rng: np.random.Generator, agent: Agent, kinds: tuple[str, ...]) -> list[Turn]:
    n_turns = int(rng.integers(agent.min_turns, agent.max_turns + 1))
    if "context_growth" in kinds:
        n_turns = max(n_turns, 5)
    if {"repeated_tool_call", "serial_gap"} & set(kinds):
        n_turns = max(n_turns, 3)
    if {"slow_step", "parallelizable_calls"} & set(kinds):
        n_turns = max(n_turns, 2)
    seen: set[str] = set()
    growth = "context_growth" in kinds
    turns = []
    for i in range(n_turns):
        if i == n_turns - 1:
            turns.append(Turn(output_tokens=int(rng.integers(*agent.final_tokens))))
            break
        n_calls = 1 + int(rng.choice(agent.max_calls, p=_call_weights(agent.max_calls)))
        if agent.pattern == "parallel":
            tools = [agent.tools[int(j)] for j in rng.choice(len(agent.tools), size=n_calls, replace=False)]
        else:
            tools = [agent.tools[int(j)] for j in rng.integers(0, len(agent.tools), size=n_calls)]
        calls = [Call(tool, unique_args(rng, tool, seen), _result_tokens(rng, growth)) for tool in tools]
        turns.append(Turn(output_tokens=int(rng.integers(20, 120)) + 15 * n_calls, calls=calls))
    return turns


def _call_weights(n: int) -> list[float]:
    weights = [0.5, 0.3, 0.2][:n]
    return [w / sum(weights) for w in weights]


def _result_tokens(rng: np.random.Generator, growth: bool) -> int:
    return int(rng.integers(*GROWTH_RESULT_TOKENS)) if growth else int(rng.integers(40, 200))


def _serial_waste(turn: Turn) -> float:
    medians = [c.tool.median_ms for c in turn.calls]
    return sum(medians) - max(medians)


def _inject(rng: np.random.Generator, agent: Agent, turns: list[Turn], kinds: tuple[str, ...]) -> dict:
    """Apply the chosen problems to a plan; returns what the labels need to know."""
    marks: dict = {}
    tool_turns = [t for t in turns if t.calls]
    if "parallelizable_calls" in kinds:
        candidates = [t for t in tool_turns if len(t.calls) >= 2]
        if not candidates:
            turn = tool_turns[int(rng.integers(0, len(tool_turns)))]
            spare = [tool for tool in agent.tools if tool not in {c.tool for c in turn.calls}]
            seen = {request_key(c.tool, c.args) for t in turns for c in t.calls}
            for tool in spare[: int(rng.integers(1, 3))]:
                turn.calls.append(Call(tool, unique_args(rng, tool, seen), turn.calls[0].result_tokens))
            candidates = [turn]
        turn = candidates[int(rng.integers(0, len(candidates)))]
        turn.serial = True
        # Half the time strictly one after another; otherwise each call starts when the one
        # before is half to nearly done (a framework that dispatches with a delay): they overlap partly.
        turn.stagger = 1.0 if rng.random() < 0.5 else float(rng.uniform(*PARTIAL_STAGGER))
        # Make it a problem worth the name: add calls until serialising them costs ≥ 150 ms.
        seen = {request_key(c.tool, c.args) for t in turns for c in t.calls}
        spare = sorted((tool for tool in agent.tools if tool not in {c.tool for c in turn.calls}),
                       key=lambda tool: -tool.median_ms)
        while spare and _serial_waste(turn) < PARALLEL_MIN_WASTE_MS:
            tool = spare.pop(0)
            turn.calls.append(Call(tool, unique_args(rng, tool, seen), turn.calls[0].result_tokens))
        marks["parallelizable_calls"] = turn
    if "repeated_tool_call" in kinds:
        i = int(rng.integers(0, len(tool_turns) - 1))
        j = int(rng.integers(i + 1, len(tool_turns)))
        original = tool_turns[i].calls[int(rng.integers(0, len(tool_turns[i].calls)))]
        repeat = Call(original.tool, asked_again(original.args, rng), original.result_tokens,
                      repeat_of=original)
        tool_turns[j].calls.append(repeat)
        marks["repeated_tool_call"] = repeat
    if "slow_step" in kinds:
        calls = [c for t in tool_turns for c in t.calls if c.repeat_of is None]
        call = calls[int(rng.integers(0, len(calls)))]
        call.slow_factor = float(rng.uniform(*SLOW_FACTOR))
        marks["slow_step"] = call
    if "serial_gap" in kinds:
        turn = turns[int(rng.integers(1, len(turns)))]
        turn.gap_before_ms = float(rng.uniform(*GAP_MS))
        marks["serial_gap"] = turn
    return marks


def _near_repeat(rng: np.random.Generator, turns: list[Turn]) -> None:
    """Sometimes a later turn asks an earlier call's tool again with one argument changed
    (another date, the next page): a new request, not a repeat, and not labelled."""
    tool_turns = [t for t in turns if t.calls and not t.serial]
    if len(tool_turns) < 2 or rng.random() >= NEAR_REPEAT_RATE:
        return
    i = int(rng.integers(0, len(tool_turns) - 1))
    j = int(rng.integers(i + 1, len(tool_turns)))
    candidates = [c for c in tool_turns[i].calls if c.repeat_of is None]
    if not candidates:
        return
    original = candidates[int(rng.integers(0, len(candidates)))]
    seen = {request_key(c.tool, c.args) for t in turns for c in t.calls}
    args = one_changed(original.tool, original.args, rng)
    if args is not None and request_key(original.tool, args) not in seen:
        tool_turns[j].calls.append(Call(original.tool, args, original.result_tokens))


def _retries(rng: np.random.Generator, turns: list[Turn]) -> None:
    """Agent code sends most failed calls again, arguments unchanged, once the error is back:
    the same request twice, and no waste (the first one failed)."""
    for turn in turns:
        if turn.serial:
            continue
        for call in list(turn.calls):
            if call.status == "error" and rng.random() < RETRY_SHARE:
                turn.calls.insert(turn.calls.index(call) + 1,
                                  Call(call.tool, call.args, call.result_tokens, retry_of=call, after=call))


# --- the run ---------------------------------------------------------------------------------


def simulate(config: SimulationConfig) -> Simulation:
    if config.tasks < 0:
        raise ValueError("tasks: must be 0 or more")
    if config.end_ms - config.start_ms < 3_600_000:
        raise ValueError("the simulated period must be at least one hour long")
    if config.dependencies not in DEPENDENCY_MODES:
        raise ValueError(f"dependencies: one of {', '.join(DEPENDENCY_MODES)}")
    rng = np.random.default_rng([config.seed, 0])
    devices = make_devices(config.devices, rng)
    if not devices:
        raise ValueError("need at least one device")
    arrivals = _arrivals(config, devices, rng)
    _open_windows(arrivals, rng)
    tasks: list[list[dict]] = []
    labels: list[dict] = []
    dependencies: dict[str, dict[str, list[str]]] = {}
    server_spans: list[dict] = []
    served: dict[str, dict[str, int]] = {}
    step_count = 0
    for arrival in arrivals:
        events, task_labels, task_dependencies, spans = _task(
            config, arrival, np.random.default_rng([config.seed, 1, arrival.index]))
        tasks.append(events)
        labels.extend(task_labels)
        server_spans.extend(spans)
        models = served.setdefault(arrival.device.name, {})
        models[arrival.agent.model] = models.get(arrival.agent.model, 0) + 1
        if task_dependencies:
            dependencies[events[0]["task_id"]] = task_dependencies
        step_count += len(events) - 1
    metrics = []
    for i, device in enumerate(devices):
        readings = device_readings(device, start_ms=config.start_ms, end_ms=config.end_ms,
                                   rng=np.random.default_rng([config.seed, 2, i]))
        models = served.get(device.name) or {"": 0}
        metrics.extend(otlp_metrics(device, readings, served_model=max(models, key=lambda m: (models[m], m))))
    return Simulation(tasks=tasks, metrics=metrics, labels=labels, step_count=step_count,
                      dependencies=dependencies, server_spans=server_spans)


def _arrivals(config: SimulationConfig, devices: list[SimDevice], rng: np.random.Generator) -> list[Arrival]:
    span = config.end_ms - config.start_ms
    weights = np.array([a.weight for a in AGENTS])
    weights /= weights.sum()
    arrivals: list[Arrival] = []
    n_rel = max(len(config.releases), 1)
    while len(arrivals) < config.tasks:
        # Diurnal rhythm by rejection: busy afternoons, quiet nights (UTC).
        t = config.start_ms + float(rng.uniform(0, span)) * 0.97
        hour = (t / 3_600_000.0) % 24
        if rng.random() > 0.35 + 0.65 * (0.5 - 0.5 * np.cos(2 * np.pi * (hour - 4) / 24)):
            continue
        agent = AGENTS[int(rng.choice(len(AGENTS), p=weights))]
        conversational = agent.pattern == "parallel"
        session = _hex(config.seed, "session", len(arrivals), n=16)
        n_in_session = int(rng.integers(1, 5)) if conversational else 1
        for k in range(n_in_session):
            if len(arrivals) >= config.tasks:
                break
            start = t + k * float(rng.uniform(60_000, 300_000))
            if start >= config.end_ms - 120_000:
                break
            fraction = (start - config.start_ms) / span
            release = min(int(fraction * n_rel), n_rel - 1)
            if release + 1 < n_rel and fraction * n_rel - release > 0.9 and rng.random() < 0.3:
                release += 1  # canary: the next release already takes some traffic
            kinds: tuple[str, ...] = ()
            if rng.random() < config.anomaly_rate:
                kinds = _choose_kinds(rng, agent, release)
            arrivals.append(Arrival(index=len(arrivals), start_ms=start, agent=agent, release_index=release,
                                    device=devices[int(rng.integers(0, len(devices)))],
                                    session_id=session, kinds=kinds))
    arrivals.sort(key=lambda a: (a.start_ms, a.index))
    for i, a in enumerate(arrivals):
        a.index = i
    return arrivals


def _choose_kinds(rng: np.random.Generator, agent: Agent, release: int) -> tuple[str, ...]:
    weights = dict(KIND_WEIGHTS)
    if agent.pattern != "parallel":
        weights.pop("parallelizable_calls")
    if agent.model_params_b < 30:
        # Prefill of a small model is so cheap that even 20k extra tokens hide in queue noise
        # on fast hardware: the TTFT would not visibly climb, so the label would not be true.
        weights.pop("context_growth")
    if release >= 1:
        weights["repeated_tool_call"] *= 0.35  # the result cache removed most repeats
    names = list(weights)
    p = np.array([weights[n] for n in names])
    n = 2 if rng.random() < 0.15 else 1
    picked = rng.choice(len(names), size=n, replace=False, p=p / p.sum())
    chosen = [names[int(i)] for i in picked]
    if all(k in HARDWARE_KINDS for k in chosen) and len(chosen) == 2:
        chosen = chosen[:1]  # one fault window per task
    return tuple(sorted(chosen))


def _open_windows(arrivals: list[Arrival], rng: np.random.Generator) -> None:
    for a in arrivals:
        hw = [k for k in a.kinds if k in HARDWARE_KINDS]
        if not hw:
            continue
        start = a.start_ms - float(rng.uniform(5_000, 30_000))
        end = a.start_ms + float(rng.uniform(*WINDOW_S)) * 1000
        if a.device.overlaps(start, end, margin_ms=120_000):
            # Already inside (or next to) another window on this device: do not stack faults;
            # the task keeps its other problems, if any.
            a.kinds = tuple(k for k in a.kinds if k not in HARDWARE_KINDS)
            continue
        depth = 0.0
        extra: dict = {}
        if hw[0] == "hardware_queueing":
            depth = round(float(rng.uniform(*QUEUE_EXTRA_TTFT_MS)) / a.device.model.queue_slot_ms)
        elif hw[0] == "hardware_throttling":
            extra = {"gpu": int(rng.integers(0, a.device.accelerators)),
                     "reasons": THROTTLE_REASONS[int(rng.integers(0, len(THROTTLE_REASONS)))],
                     "clock_share": float(rng.uniform(*THROTTLE_CLOCK_SHARE))}
        a.device.add_window(Window(a.device.name, hw[0], start, end, depth, **extra))


def _ns(t_ms: float) -> int:
    return int(round(t_ms * 1000)) * 1000


def _median_ms(tool: Tool, release: int) -> float:
    median = tool.median_ms
    if release >= 1 and tool.cacheable:
        median *= CACHE_SPEEDUP
    if release == 2 and tool.name == REGRESSED_TOOL:
        median *= REGRESSION_FACTOR
    return median


def _task(config: SimulationConfig, a: Arrival,
          rng: np.random.Generator) -> tuple[list[dict], list[dict], dict[str, list[str]], list[dict]]:
    """One task's events (task, root step, steps in time order), its labels, (evidence
    mode) its dependencies and its server spans (OTLP resourceSpans)."""
    turns = _plan(rng, a.agent, a.kinds)
    marks = _inject(rng, a.agent, turns, a.kinds)
    _near_repeat(rng, turns)
    status = "ok"
    if not a.kinds and rng.random() < TIMEOUT_RATE and len(turns) >= 2:
        # The last call of the last tool turn hangs until its timeout and the framework gives
        # up: no later call waits on it, no final answer follows.
        turns = turns[:-1]
        turns[-1].calls[-1].status = "timeout"
        status = "timeout"
    marked = {id(m) for m in marks.values() if isinstance(m, Call)}
    marked |= {id(m.repeat_of) for m in marks.values() if isinstance(m, Call) and m.repeat_of}
    for turn in turns:
        for call in turn.calls:
            if call.status == "ok" and id(call) not in marked and rng.random() < ERROR_RATE:
                call.status = "error"  # the agent reads the error and carries on
                if len(turns) >= 2 and turn is turns[-2] and status == "ok" and rng.random() < 0.5:
                    status = "error"
    _retries(rng, turns)
    timeline = _Timeline(config, a, rng)
    if config.dependencies == "evidence":
        # Its own generator: the plan above draws exactly what declared mode draws.
        evidence_rng = np.random.default_rng([config.seed, 3, a.index])
        timeline.call_ids_reported = bool(evidence_rng.random() >= UNREPORTED_CALL_IDS_RATE)
        growth = "context_growth" in a.kinds
        wire(evidence_rng, a.agent, turns, result_tokens=lambda: _result_tokens(evidence_rng, growth),
             user_id=short_id(evidence_rng, "c"))
    events, labels = timeline.run(turns, status)
    return events, labels, timeline.dependencies, timeline.server_spans


class _Timeline:
    """Lays a planned task out in time: LLM turn, the tool calls it issues, the next turn…
    and records the labels of what was injected as it goes."""

    def __init__(self, config: SimulationConfig, a: Arrival, rng: np.random.Generator):
        self.a, self.rng, self.agent, self.device, self.hw = a, rng, a.agent, a.device, a.device.model
        self.task_id = _hex(config.seed, "task", a.index, n=32)
        self.release = config.releases[a.release_index] if config.releases else ""
        self.environment = config.environment
        self.root_id = _hex(self.task_id, 0, n=16)
        self.counter = 0
        self.steps: list[dict] = []
        self.llm_steps: list[dict] = []
        self.labels: list[dict] = []
        self.hw_hits: dict[str, list[tuple[str, float]]] = {}
        self.previous_tools: list[str] = []
        self.last_step_id = ""
        self.evidence = config.dependencies == "evidence"
        self.call_ids_reported = True
        self.calls_issued = 0
        self.dependencies: dict[str, list[str]] = {}
        # Its own generator, so that whether a task carries server spans reshuffles nothing else.
        self.span_rng = np.random.default_rng([config.seed, 4, a.index])
        self.traced_to_server = bool(self.span_rng.random() < SERVER_SPAN_RATE)
        self.server_spans: list[dict] = []

    def next_id(self) -> str:
        self.counter += 1
        return _hex(self.task_id, self.counter, n=16)

    def run(self, turns: list[Turn], status: str) -> tuple[list[dict], list[dict]]:
        rng = self.rng
        t = self.a.start_ms + float(rng.uniform(2, 15))  # request parsing before the first turn
        self.context = int(rng.integers(*self.agent.system_tokens)) + int(rng.integers(40, 300))
        for turn in turns:
            if turn.gap_before_ms:
                gap_start = t
                t += turn.gap_before_ms
            elif self.previous_tools:
                t += float(rng.lognormal(np.log(15.0), 0.5))  # framework: parse, append, re-prompt
            step_id, t_end = self.llm_turn(t, turn)
            if turn.gap_before_ms:
                self.label("serial_gap", [self.last_step_id, step_id], turn.gap_before_ms,
                           gap_start_ns=_ns(gap_start))
            t, self.last_step_id = t_end, step_id
            if not turn.calls:
                break
            t = self.tool_calls(t + float(rng.lognormal(np.log(8.0), 0.5)), turn)
            if any(c.status == "timeout" for c in turn.calls):
                break
        end = t + float(rng.uniform(2, 20))
        self.task_labels()
        task = {"type": "task", "task_id": self.task_id, "name": self.agent.name, "release": self.release,
                "environment": self.environment, "session_id": self.a.session_id,
                "started_at": _ns(self.a.start_ms), "ended_at": _ns(end), "status": status,
                "attributes": {"user_tier": ("free", "pro", "enterprise")[self.a.index % 3], "channel": "api"}}
        root = {"type": "step", "task_id": self.task_id, "step_id": self.root_id, "parent_step_id": "",
                "kind": "agent", "name": self.agent.name, "started_at": _ns(self.a.start_ms), "ended_at": _ns(end),
                "status": status, "attributes": {}}
        return [task, root, *self.steps], self.labels

    def llm_turn(self, t: float, turn: Turn) -> tuple[str, float]:
        """The LLM step at `t` on the task's device, as that device was at that moment."""
        rng, hw, device = self.rng, self.hw, self.device
        step_id = self.next_id()
        window = device.window_at(t)
        batch = device.batch(t) * float(rng.uniform(0.9, 1.1))
        nominal = {"queue_depth": device.background_queue(t), "batch_size": batch,
                   "model_params_b": self.agent.model_params_b}
        state = dict(nominal)
        if window is not None and window.kind == "hardware_queueing":
            state.update(queue_depth=window.queue_depth * float(rng.uniform(0.9, 1.1)),
                         batch_size=hw.max_batch * 0.9)
        elif window is not None and window.kind == "hardware_throttling":
            state["throttled"] = True
        context = self.context
        cached = min(self.agent.system_tokens[0], context) if self.a.release_index >= 1 else 0
        prefill_tokens = context - cached + cached // 10  # reusing a cached prefix is not free
        ttft = hw.sample_ttft_ms(rng, prefill_tokens, **state)
        tpot = hw.sample_tpot_ms(rng, **state)
        duration = ttft + tpot * turn.output_tokens
        preempted_ms = 0.0
        if window is not None and window.kind == "hardware_kv_cache_pressure" \
                and self.span_rng.random() < KV_PREEMPT_SHARE:
            # Evicted mid-decode when the cache ran out: it waits to be re-admitted, then its
            # prompt and the tokens so far are prefilled again.
            preempted_ms = float(self.span_rng.uniform(*KV_REQUEUE_MS)) + hw.ttft_ms(
                context + turn.output_tokens // 2, batch_size=nominal["batch_size"],
                model_params_b=self.agent.model_params_b)
            duration += preempted_ms
        step = {"type": "step", "task_id": self.task_id, "step_id": step_id, "parent_step_id": self.root_id,
                "kind": "llm", "name": f"chat {self.agent.model}", "started_at": _ns(t),
                "ended_at": _ns(t + duration), "status": "ok", "model": self.agent.model, "device": device.server,
                "input_tokens": context, "output_tokens": turn.output_tokens, "cached_tokens": cached,
                "ttft_ms": round(ttft, 3), "streamed": True, "depends_on": self.previous_tools,
                "attributes": {"gen_ai.system": hw.vendor, "turn": len(self.llm_steps) + 1}}
        if self.evidence:
            self.show_requested_calls(step, turn)
        self.steps.append(step)
        self.llm_steps.append(step)
        device.llm_steps.append((t, t + duration))
        if self.traced_to_server:
            queue_ms = ttft * hw._queue_wait_ms(state["queue_depth"], model_params_b=self.agent.model_params_b) \
                / hw.ttft_ms(prefill_tokens, **state)
            self.server_span(step, t, duration, ttft, queue_ms, prefill_tokens)
        if window is not None:
            # What this very step would have taken without the fault: same luck, scaled by
            # the ratio of expected durations.
            sampled = duration - preempted_ms
            usual = sampled * hw.step_ms(prefill_tokens, turn.output_tokens, **nominal) / hw.step_ms(
                prefill_tokens, turn.output_tokens, **state)
            extra = duration - usual
            if extra >= max(HW_MIN_EXTRA_MS, HW_MIN_EXTRA_RATIO * usual):
                self.hw_hits.setdefault(window.kind, []).append((step_id, extra))
        self.context += turn.output_tokens
        return step_id, t + duration

    def server_span(self, step: dict, t: float, duration: float, ttft: float, queue_ms: float,
                    prefill_tokens: int) -> None:
        """vLLM's `llm_request` span of this call (`--otlp-traces-endpoint`), a SERVER child of
        the client's chat span: its queue, prefill and decode times as the server measured them."""
        rng = self.span_rng
        net = float(rng.uniform(0.3, 2.0))
        seconds = lambda ms: {"doubleValue": round(max(ms, 0.0) / 1000.0, 6)}  # noqa: E731
        attributes = {
            "gen_ai.request.model": {"stringValue": self.agent.model},
            "gen_ai.response.model": {"stringValue": self.agent.model},
            "gen_ai.usage.prompt_tokens": {"intValue": str(step["input_tokens"])},
            "gen_ai.usage.completion_tokens": {"intValue": str(step["output_tokens"])},
            "gen_ai.latency.time_in_queue": seconds(queue_ms),
            "gen_ai.latency.time_to_first_token": seconds(ttft - net),
            "gen_ai.latency.time_in_model_prefill": seconds(ttft - queue_ms - net),
            "gen_ai.latency.time_in_model_decode": seconds(duration - ttft - net),
            "gen_ai.latency.time_in_model_inference": seconds(duration - queue_ms - 2 * net),
            "gen_ai.latency.e2e": seconds(duration - 2 * net),
        }
        span = {"traceId": self.task_id, "spanId": _hex(self.task_id, "server", step["step_id"], n=16),
                "parentSpanId": step["step_id"], "name": "llm_request", "kind": 2,
                "startTimeUnixNano": str(_ns(t + net)), "endTimeUnixNano": str(_ns(t + duration - net)),
                "attributes": [{"key": k, "value": v} for k, v in attributes.items()], "status": {}}
        self.server_spans.append({
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}},
                                        {"key": "service.instance.id", "value": {"stringValue": self.device.server}},
                                        {"key": "host.name", "value": {"stringValue": self.device.host}}]},
            "scopeSpans": [{"scope": {"name": "vllm.llm_engine"}, "spans": [span]}]})

    def tool_calls(self, issued: float, turn: Turn) -> float:
        """The turn's calls: concurrent, chained (declared mode: each consuming the previous;
        evidence mode: follow-ups agent code runs on a result), or — injected — independent but
        one after another. Returns when the last one ends."""
        rng = self.rng
        self.previous_tools = []
        requested = 0  # evidence mode: this call's position among those the response requested
        for n, call in enumerate(turn.calls):
            call.step_id = self.next_id()
            median = _median_ms(call.tool, self.a.release_index)
            if call.status == "timeout":
                dur = call.tool.timeout_ms
            elif call.status == "error":
                dur = median * float(rng.uniform(0.1, 0.6))
            elif call.slow_factor > 1.0:
                dur = median * call.slow_factor * float(rng.lognormal(0.0, 0.05))  # stuck, not unlucky
            else:
                dur = median * float(rng.lognormal(0.0, call.tool.sigma))
            depends_on: list[str] = []
            if call.retry_of is not None:
                # Agent code sends the failed call again as soon as the error is back (no
                # backoff wait is modelled: that would be idle time of its own).
                start = call.retry_of.end_ms + float(rng.lognormal(np.log(6.0), 0.5))
            elif self.evidence:
                start = self.evidence_start(call, turn, n, requested, issued, dur)
                requested += call.requested
            elif self.agent.pattern == "chain" and n > 0:
                start = turn.calls[n - 1].end_ms + float(rng.lognormal(np.log(6.0), 0.5))
                depends_on = [turn.calls[n - 1].step_id]
            elif turn.serial and n > 0:
                start = self.after_previous(turn.calls[n - 1], turn, dur)
            else:
                start = issued + n * float(rng.uniform(0.3, 3.0))
            call.start_ms, call.end_ms = start, start + dur
            step = {"type": "step", "task_id": self.task_id, "step_id": call.step_id,
                    "parent_step_id": self.root_id, "kind": call.tool.kind, "name": call.tool.name,
                    "started_at": _ns(start), "ended_at": _ns(start + dur), "status": call.status,
                    "tool_name": call.tool.name, "tool_args": call.args, "depends_on": depends_on,
                    "attributes": {"result_tokens": call.result_tokens}}
            if call.status == "error":
                step["error"] = _ERRORS[int(rng.integers(0, len(_ERRORS)))]
            elif call.status == "timeout":
                step["error"] = f"tool call timed out after {call.tool.timeout_ms / 1000:g} s"
            if self.evidence:
                self.show_result(step, call)
            self.steps.append(step)
            self.previous_tools.append(call.step_id)
            self.context += call.result_tokens
            if call.slow_factor > 1.0:
                self.label("slow_step", [call.step_id], dur - median, baseline_median_ms=round(median, 1))
            if call.repeat_of is not None:
                self.label("repeated_tool_call", [call.repeat_of.step_id, call.step_id], dur, tool=call.tool.name)
        last = max(turn.calls, key=lambda c: c.end_ms)
        self.last_step_id = last.step_id
        if turn.serial:
            # Dispatched together they would all have been done when the longest one was.
            longest = max(c.end_ms - c.start_ms for c in turn.calls)
            spanned = max(c.end_ms for c in turn.calls) - min(c.start_ms for c in turn.calls)
            extra = {"tool_call_ids_reported": self.call_ids_reported} if self.evidence else {}
            self.label("parallelizable_calls", [c.step_id for c in turn.calls], spanned - longest,
                       stagger=round(turn.stagger, 2), **extra)
        return last.end_ms

    # --- evidence mode: what real agents show instead of depends_on --------------------------

    def show_requested_calls(self, step: dict, turn: Turn) -> None:
        """Call ids for the turn's calls; the LLM step lists those its response requested
        (not the follow-ups agent code runs), when the instrumentation reports them."""
        del step["depends_on"]
        for call in turn.calls:
            self.calls_issued += 1
            call.call_id = "call_" + _hex(self.task_id, "call", self.calls_issued, n=24)
        requested = [c.call_id for c in turn.calls if c.requested]
        if requested and self.call_ids_reported:
            step["tool_call_ids"] = requested

    def evidence_start(self, call: Call, turn: Turn, n: int, requested: int, issued: float, dur: float) -> float:
        rng = self.rng
        if call.after is not None:
            # Agent code dispatches the follow-up as soon as the result it reads is in.
            return call.after.end_ms + float(rng.lognormal(np.log(6.0), 0.5))
        if turn.serial and requested > 0:
            return self.after_previous(turn.calls[n - 1], turn, dur)
        # Frameworks dispatch the calls of one response together: overlapping, a little skew.
        return issued + requested * float(rng.uniform(0.3, 3.0))

    def after_previous(self, previous: Call, turn: Turn, dur: float) -> float:
        """In a serialised turn: a hand-off of a few ms after the call before ends, or — partly
        serialised — before it ends, overlapping it by (1 − stagger) of the shorter of the two,
        so that each call still ends after the one before and the turn takes longer than its
        longest call."""
        if turn.stagger >= 1.0:
            return previous.end_ms + float(self.rng.lognormal(np.log(6.0), 0.5))
        return previous.end_ms - (1.0 - turn.stagger) * min(previous.end_ms - previous.start_ms, dur)

    def show_result(self, step: dict, call: Call) -> None:
        del step["depends_on"]
        step["tool_call_id"] = call.call_id
        if call.status == "ok":
            step["tool_result"] = result_text(call.result)
        elif call.status == "error":
            step["tool_result"] = step["error"]  # what the framework hands back to the model
        if call.sources:
            self.dependencies[call.step_id] = [s.step_id for s in call.sources]

    def task_labels(self) -> None:
        if "context_growth" in self.a.kinds:
            first = self.llm_steps[0]["ttft_ms"]
            extra = sum(max(s["ttft_ms"] - first, 0.0) for s in self.llm_steps[1:])
            self.label("context_growth", [s["step_id"] for s in self.llm_steps], extra,
                       input_tokens=[s["input_tokens"] for s in self.llm_steps])
        for kind, hits in sorted(self.hw_hits.items()):
            self.label(kind, [s for s, _ in hits], sum(e for _, e in hits), device=self.device.server,
                       verdicts={s: VERDICTS[kind] for s, _ in hits},
                       step_magnitude_ms={s: round(e, 1) for s, e in hits})

    def label(self, kind: str, step_ids: list[str], magnitude_ms: float, **extra) -> None:
        self.labels.append({**_label(self.task_id, kind, step_ids, magnitude_ms, **extra),
                            "release": self.release, "task_name": self.agent.name})


def _label(task_id: str, kind: str, step_ids: list[str], magnitude_ms: float, **extra) -> dict:
    return {"task_id": task_id, "step_ids": step_ids, "kind": kind, "magnitude_ms": round(magnitude_ms, 1), **extra}
