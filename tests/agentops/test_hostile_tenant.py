"""One tenant's costly read cannot stall the others (issue 39, attack 1), on runstack's gunicorn as
users run it: while one project's key sends search patterns built to backtrack (`*a*a*…*b` against
a tool named `a`×100: they froze both web workers for 63 s when patterns were regexes), another
project's reads still answer, typically within 2 s; and the attacker's own requests are answered,
not left hanging."""

from __future__ import annotations

import json
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import requests

from analysis.filters import MAX_PATTERN_WILDCARDS
from ingest.models import IngestKey, Project
from ingest.services import key_create
from tests.agentops.test_slow_clients import probe
from tests.conftest import faults_pass

ANSWER_WITHIN = 2.0
PROBES = 6
BACKTRACKING = "*a" * MAX_PATTERN_WILDCARDS + "b"


def send_task(url: str, key: str, task_id: str, tool: str) -> None:
    t0 = datetime(2026, 11, 3, tzinfo=UTC)
    events = [{"type": "task", "task_id": task_id, "name": "agent", "started_at": t0.isoformat(),
               "ended_at": (t0 + timedelta(seconds=2)).isoformat()},
              {"type": "step", "task_id": task_id, "step_id": "s1", "kind": "tool", "name": tool, "tool_name": tool,
               "started_at": t0.isoformat(), "ended_at": (t0 + timedelta(seconds=1)).isoformat()}]
    r = requests.post(f"{url}/api/v1/ingest", data=json.dumps({"events": events}), timeout=30,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    assert r.status_code == 200, r.text[:500]


class Searches:
    """Threads that send the backtracking search with the attacker's key until stopped, keeping
    every answer's status (None: no answer within 70 s, longer than gunicorn's worker timeout)."""

    def __init__(self, url: str, key: str, threads: int = 4):
        self.url, self.key = url, key
        self.stop = threading.Event()
        self.answers: list[int | None] = []
        self.threads = [threading.Thread(target=self.search, args=(i,), daemon=True) for i in range(threads)]

    def search(self, i: int) -> None:
        path, params = [("/api/v1/search/values", {"field": "tool", "q": BACKTRACKING}),
                        ("/api/v1/tasks", {"tool": BACKTRACKING})][i % 2]
        while not self.stop.is_set():
            try:
                status = requests.get(f"{self.url}{path}", params=params, timeout=70,
                                      headers={"Authorization": f"Bearer {self.key}"}).status_code
            except requests.RequestException:
                status = None
            self.answers.append(status)

    def __enter__(self) -> Searches:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(75)


@pytest.mark.slow
@faults_pass
def test_a_search_built_to_backtrack_does_not_stall_another_projects_reads(stack_env, tmp_path):
    from tests.agentops.test_runstack import Stack

    scopes = [IngestKey.SCOPE_INGEST, IngestKey.SCOPE_READ]
    _, attacker = key_create(project=Project.objects.create(name="attacker"), scopes=scopes)
    _, bystander = key_create(project=Project.objects.create(name="bystander"), scopes=scopes)
    stack_env["AGENTOPS_DATA_DIR"] = str(tmp_path)
    with Stack(stack_env, tmp_path / "runstack.log", "--web-workers", "2", "--worker-concurrency", "1",
               "--no-beat") as stack:
        send_task(stack.url, attacker, "long-name", "a" * 100)
        send_task(stack.url, bystander, "theirs", "search")
        theirs = f"{stack.url}/api/v1/tasks"
        headers = {"Authorization": f"Bearer {bystander}"}
        for _ in range(PROBES):  # every worker's first connection and URL conf, before the attack
            probe(theirs, headers=headers, timeout=30)
        with Searches(stack.url, attacker) as attack:
            time.sleep(1.0)
            times = [probe(theirs, headers=headers, timeout=10) for _ in range(PROBES)]
        answers = attack.answers
    print(json.dumps({"bystander": times, "attack_answers": len(answers), "attack_statuses": sorted(set(map(str, answers)))}))
    assert all(status == 200 for _, status in times), times
    assert statistics.median(seconds for seconds, _ in times) < ANSWER_WITHIN, times
    # The attacker's searches were answered (200: no match), many times over, none left hanging.
    assert len(answers) >= len(attack.threads) and set(answers) == {200}, answers[:20]
