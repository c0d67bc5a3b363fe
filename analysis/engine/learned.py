"""Call dependencies learned from each agent's own runs.

One trace rarely says whether a call needed another's output. The agent's other runs often do:
- **Rarity.** A value that occurs in one run (customer `c4821`, ticket `A7`, row `93`) and shows
  up in a later call's arguments flowed there; a value found in most runs (`EU`, `true`, the
  tenant's name, today's date) is no evidence at all, whatever its length or shape. A token is
  *common* when it occurs in more than RARE_SHARE of the agent's last WINDOW_RUNS runs; every
  other token is evidence.
- **Per pair of calls** (a call is its tool and its position among that tool's calls in the
  turn: `search#0`, `search#1`; a turn's first LEARN_CALLS calls, each with the LINK_WINDOW calls
  before it), over the runs where both ran and succeeded: in how many a value that first
  appeared in the earlier call's result reached the later call's arguments (`flow_runs`), only
  values common to the agent's runs linked them (`blind_runs`: flow cannot be told there), the two
  overlapped in time (`concurrent_runs`), one model response requested both (`together_runs`,
  whether or not a value flowed: a planner requests both and its executor passes the first
  result on), and how many distinct results the earlier call returned.

From these (`pair_verdict`):
- dependent when the flow appears in more than half of the runs where both ran;
- independent when no flow appeared (in at most NO_FLOW_SHARE of the runs) and the agent ran them
  concurrently in some run (of this release, or of another one of the same agent: `profiles_for`
  hands the detectors the other releases' pairs too), or one after the other in both orders;
- unknown otherwise, "no flow over many runs" included: a finding resting on it is only "possible".
Cold start: with fewer than MIN_RUNS runs of the agent, rarity is measured against the project's
recent traffic (the profile of agent ""), and with fewer than that too, by the value-shape rule
of dependencies.py; pairs without history fall back to the one trace's evidence.

Profiles and pairs live in AgentProfile and CallPair, one set per (project, agent, release),
refreshed by the analysis workers (`refresh_due`, Celery beat every REFRESH_SECONDS) from the
tasks that ended since the last refresh, never per request.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Max

from analysis.engine.detectors.dependencies import (
    CALL_KINDS,
    LEARNED_UNKNOWN,
    LINK_WINDOW,
    Evidence,
    PairStats,
    Profile,
    all_tokens,
    call_names,
    concurrent,
    pair_verdict,
)
from analysis.engine.detectors.parallelizable_calls import distinct_calls, turn_groups
from analysis.engine.steps import load_steps
from analysis.models import AgentProfile, CallPair
from ingest.models import Task

log = logging.getLogger("agentops.analysis")

WINDOW_RUNS = 200
MIN_RUNS = 20
RARE_SHARE = 0.1
MAX_COMMON_TOKENS = 5_000
REFRESH_SECONDS = 60
# Agents refreshed per run of refresh_due; the rest wait for the next one.
REFRESH_BATCH = 50
PROJECT_AGENT = ""  # the profile of the project's whole traffic
# Calls of one turn learned from: agents request a handful per turn; a batch turn of thousands
# would make pairs grow with the square of its calls (1,000 calls took 43 s). The rest of such a
# turn is judged on its own trace's evidence.
LEARN_CALLS = 64

def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(errors="replace"), digest_size=8).hexdigest()


# --- learning from runs --------------------------------------------------------------------------

def _runs(project_id: int, task_pks: list[int]):
    """Each task's model and tool calls as the detectors see them (the turns and calls pairs are named by)."""
    with connection.cursor() as cursor:
        return load_steps(cursor, task_pks, projects=[project_id], kinds=("llm", *CALL_KINDS))


def common_tokens(runs: list[list]) -> tuple[frozenset[str], int]:
    """The tokens found in more than RARE_SHARE of the runs (their calls' arguments and
    results), at most MAX_COMMON_TOKENS of the most frequent."""
    df: Counter = Counter()
    for steps in runs:
        seen: set[str] = set()
        for s in steps:
            if s.kind in CALL_KINDS:
                seen |= all_tokens(s.tool_args)
                if s.tool_result:
                    seen |= all_tokens(s.tool_result)
        df.update(seen)
    n = len(runs)
    common = [t for t, c in df.most_common(MAX_COMMON_TOKENS) if c > RARE_SHARE * n]
    return frozenset(common), n


def pair_stats(runs: list[list], profile: Profile) -> dict[tuple[str, str], PairStats]:
    """Count, over the runs, the evidence of every ordered pair of calls of a turn where both
    succeeded (a failed call shows neither flow nor independence). A turn's first LEARN_CALLS
    calls are learned from, each paired with the LINK_WINDOW calls before it, as the detector
    links them: a turn of 10,000 calls costs what one of LEARN_CALLS does."""
    stats: dict[tuple[str, str], PairStats] = defaultdict(PairStats)
    for steps in runs:
        evidence = Evidence(steps, profile=profile)
        seen_pairs: set[tuple[str, str]] = set()
        for group in turn_groups(steps, evidence):
            group = distinct_calls(group[:LEARN_CALLS])
            names = call_names(group)
            for j, later in enumerate(group):
                for earlier in group[max(0, j - LINK_WINDOW):j]:
                    key = (names[earlier.step_id], names[later.step_id])
                    if key in seen_pairs or earlier.status != "ok" or later.status != "ok":
                        continue
                    seen_pairs.add(key)
                    p = stats[key]
                    p.runs += 1
                    issuer = evidence.issuer(earlier)
                    if issuer is not None and issuer is evidence.issuer(later):
                        p.together_runs += 1
                    if concurrent(earlier, later):
                        p.concurrent_runs += 1
                    else:
                        p.saved_ms += min(earlier.duration_ms, later.duration_ms)
                        if evidence.flowed(earlier, later):
                            p.flow_runs += 1
                        elif evidence.blind(earlier, later):
                            p.blind_runs += 1
                    if earlier.tool_result and len(p.variants) < 16:
                        p.variants.add(_digest(earlier.tool_result))
    return stats


def _recent(project_id: int, agent: str | None, release: str | None, through: datetime | None) -> list[int]:
    qs = Task.objects.filter(project_id=project_id, ended_at__isnull=False)
    if agent is not None:
        qs = qs.filter(name=agent)
    if release is not None:
        qs = qs.filter(release=release)
    if through is not None:
        qs = qs.filter(ended_at__lte=through)
    # By start: the (project, name, started_at) and (project, started_at) indexes serve it.
    return list(qs.order_by("-started_at", "-pk").values_list("pk", flat=True)[:WINDOW_RUNS])


def refresh(project_id: int, agent: str, release: str, *, through: datetime | None = None) -> AgentProfile:
    """Learn the (project, agent, release) profile and pairs again from its last WINDOW_RUNS
    runs that ended by `through` (now when None); the project-wide profile with agent ""."""
    started = time.perf_counter()
    whole = agent == PROJECT_AGENT
    pks = _recent(project_id, None if whole else agent, None if whole else release, through)
    by_task = _runs(project_id, pks)
    runs = [by_task[pk] for pk in pks]
    common, n = common_tokens(runs)
    pairs = {} if whole else pair_stats(runs, rarity_for(project_id, agent, release, own=(common, n)))
    newest = (Task.objects.filter(project_id=project_id, pk__in=pks).aggregate(m=Max("ended_at"))["m"]) if pks else None
    with transaction.atomic():
        profile, _ = AgentProfile.objects.update_or_create(
            project_id=project_id, agent=agent, release=release,
            defaults={"runs": n, "common_tokens": sorted(common), "through": newest})
        if not whole:
            CallPair.objects.filter(project_id=project_id, agent=agent, release=release).delete()
            rows = []
            for (earlier, later), p in pairs.items():
                verdict, basis = pair_verdict(p, pairs.get((later, earlier)))
                verdict, basis = verdict or "unknown", basis or LEARNED_UNKNOWN
                serial = p.runs - p.concurrent_runs
                rows.append(CallPair(project_id=project_id, agent=agent, release=release, earlier=earlier[:210],
                                     later=later[:210], runs=p.runs, flow_runs=p.flow_runs, blind_runs=p.blind_runs,
                                     concurrent_runs=p.concurrent_runs, together_runs=p.together_runs,
                                     result_variants=len(p.variants),
                                     serial_ms=p.saved_ms / serial if serial else 0.0, verdict=verdict, basis=basis))
            CallPair.objects.bulk_create(rows, batch_size=1000)
    # What the whole refresh cost, pairs included: written once they are.
    profile.refresh_ms = (time.perf_counter() - started) * 1000
    AgentProfile.objects.filter(project_id=project_id, pk=profile.pk).update(refresh_ms=profile.refresh_ms)
    return profile


def rarity_for(project_id: int, agent: str, release: str, *, own: tuple[frozenset, int] | None = None):
    """The Profile to measure rarity with: the agent's own when it has MIN_RUNS runs, else the
    project's recent traffic, else None (the value-shape rule)."""
    if own is not None and own[1] >= MIN_RUNS:
        return Profile(own[1], own[0], {})
    row = AgentProfile.objects.filter(project_id=project_id, agent=PROJECT_AGENT, release="").first()
    if row is not None and row.runs >= MIN_RUNS:
        return Profile(row.runs, frozenset(row.common_tokens), {})
    return None


def profile_for(project_id: int, agent: str, release: str) -> Profile | None:
    """The Profile the detectors read for a task of this agent (None: nothing learned yet)."""
    return profiles_for(project_id, [(agent, release)]).get((agent, release))


def profiles_for(project_id: int, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Profile | None]:
    """profile_for, for many (agent, release) of one project in two queries."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return {}
    agents = {a for a, _ in keys}
    rows = {(p.agent, p.release): p for p in AgentProfile.objects.filter(
        project_id=project_id, agent__in=agents | {PROJECT_AGENT})}
    pairs: dict[tuple[str, str], dict] = defaultdict(dict)
    for cp in CallPair.objects.filter(project_id=project_id, agent__in=agents):
        pairs[(cp.agent, cp.release)][(cp.earlier, cp.later)] = cp
    whole = rows.get((PROJECT_AGENT, ""))
    out = {}
    for key in keys:
        own = rows.get(key)
        learned = pairs.get(key, {})
        # The agent's other releases: a release that gathers what this one runs in a loop.
        elsewhere: dict[tuple[str, str], list] = defaultdict(list)
        for (agent, release), theirs in pairs.items():
            if agent == key[0] and release != key[1]:
                for names, cp in theirs.items():
                    elsewhere[names].append(cp)
        if own is not None and own.runs >= MIN_RUNS:
            out[key] = Profile(own.runs, frozenset(own.common_tokens), learned, dict(elsewhere))
        elif whole is not None and whole.runs >= MIN_RUNS:
            out[key] = Profile(whole.runs, frozenset(whole.common_tokens), learned, dict(elsewhere))
        else:
            out[key] = Profile(0, frozenset(), learned, dict(elsewhere)) if learned or elsewhere else None
    return out


def refresh_due(*, limit: int = REFRESH_BATCH, through: datetime | None = None,
                project_id: int | None = None) -> int:
    """Refresh the profiles of the agents with tasks that ended since their last refresh (and
    the project-wide ones); returns how many were refreshed. `through` bounds what is read (a
    replay in time order), `project_id` whose; by default everything ended so far."""
    tasks = Task.objects.filter(ended_at__isnull=False)
    profiles = AgentProfile.objects.all()
    if project_id is not None:
        tasks, profiles = tasks.filter(project_id=project_id), profiles.filter(project_id=project_id)
    if through is not None:
        tasks = tasks.filter(ended_at__lte=through)
    else:
        # Only the tasks heard from since the last refresh (the last_event_at index), never a
        # scan of every task; the overlap covers a refresh that ran late.
        last = profiles.aggregate(m=Max("refreshed_at"))["m"]
        if last is not None:
            tasks = tasks.filter(last_event_at__gt=last - timedelta(seconds=2 * REFRESH_SECONDS))
    latest = tasks.values("project_id", "name", "release").annotate(newest=Max("ended_at"))
    known = {(p.project_id, p.agent, p.release): p.through for p in profiles}
    due = []
    projects: dict[int, datetime] = {}
    for row in latest:
        key = (row["project_id"], row["name"], row["release"])
        projects[row["project_id"]] = max(projects.get(row["project_id"], row["newest"]), row["newest"])
        if known.get(key) is None or known[key] < row["newest"]:
            due.append(key)
    done = 0
    for project_id, newest in projects.items():
        seen = known.get((project_id, PROJECT_AGENT, ""))
        if seen is None or seen < newest:
            refresh(project_id, PROJECT_AGENT, "", through=through)
            done += 1
    for project_id, agent, release in due[:limit]:
        refresh(project_id, agent, release, through=through)
        done += 1
    return done


def forget(*, project_id: int) -> None:
    """Drop what was learned for a project (a replay starts from nothing, as a new project does)."""
    CallPair.objects.filter(project_id=project_id).delete()
    AgentProfile.objects.filter(project_id=project_id).delete()
