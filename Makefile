# agentops: `make demo` runs the product, `make test` runs the suite. Both bootstrap .venv.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PORT ?= 8000

.PHONY: install demo test test-fast faults browsers bench soak lint clean fixtures citus citus-stop test-citus

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# Debian's Chromium for the browser tests (Playwright drives it; no browser download).
browsers:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "chromium could not be installed: browser tests will be skipped"; \
	  else echo "chromium is not installed: browser tests will be skipped"; fi; }

# demo_setup migrates, and stops the embedded services it started however it ends (Ctrl-C too).
demo: $(STAMP)
	$(BIN)/python manage.py demo_setup --port $(PORT)
	$(BIN)/python manage.py runstack --port $(PORT) --demo

test: $(STAMP) browsers
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not browser and not slow" $(PYTEST_ARGS)

# A local Citus cluster (docs/scaling.md, step 6): builds Citus into the machine's PostgreSQL 15
# from ../shared/citus/ when it lacks it (root, 1.5-4 minutes, once), starts a coordinator and two
# workers under .data/citus/ (AGENTOPS_DATA_DIR/citus/) on free loopback ports, registers the workers and
# migrates; prints the coordinator's DATABASE_URL. Not needed by demo or test.
citus: $(STAMP)
	$(BIN)/python -m agentops.citus start

citus-stop: $(STAMP)
	$(BIN)/python -m agentops.citus stop

# The suite against the Citus coordinator (the cluster is started first if it is not running),
# without the browser tests and the tests that start whole processes (slow: runstack, workers),
# the detectors' scores on recorded traces and the API fuzz (minutes of Python-side work the
# database does not change; `make test` runs them); tests that need one PostgreSQL skip, each
# saying why (`single_node` in tests/conftest.py). Repartition joins are off for the suite's
# connections (Citus's default), even on a cluster that allows them: a join of distributed tables
# that does not equate project_id fails here.
# Timing: docs/scaling.md, step 6.
CITUS_TESTS := tests --ignore=tests/recorded/test_detection.py --deselect \
	tests/security/test_schemathesis.py::test_every_api_operation_conforms_and_never_5xx
test-citus: citus
	@url=$$($(BIN)/python -m agentops.citus url) || exit 1; \
	  DATABASE_URL=$$url SECRET_KEY=citus-test-only-secret-key DEBUG=1 \
	  PGOPTIONS="-c citus.enable_repartition_joins=off" \
	  $(BIN)/python -m pytest -m "not browser and not slow" $(CITUS_TESTS) $(PYTEST_ARGS)

# Every performance figure in one run (ingest vs COPY and Arize Phoenix, analysis, queries,
# storage): a table, and bench/results/latest.json. Full size: BENCH_ARGS="--scale 1
# --analysis-steps 1000000 --peer-spans 100000" (see docs/scaling.md).
bench: $(STAMP)
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# The whole stack (web, analysis worker, periodic worker, beat) under sustained OTLP load:
# 3,000 spans/s for 10 minutes, a burst, a search for the highest sustained rate (~25 minutes);
# SOAK_ARGS="--short" for a 3-minute smoke test (bench/soak.py, docs/scaling.md).
soak: $(STAMP)
	$(BIN)/python bench/run.py --only soak --soak-args "$(SOAK_ARGS)" --out bench/results/soak-run.json

# Fault injection (Postgres restart, Redis down, web SIGTERM mid-stream, memory flood, a worker
# killed mid-analysis), the whole commands (bench, soak, demo_setup, simulate over HTTP) checked
# for what they leave behind and for every figure the bench reports, and the tests that run a
# whole stack for half a minute each (runstack and the demo console, slow and silent clients,
# an alert end to end, dead webhooks of one project, the lockout across web workers, the read
# client and the MCP tools on a running stack, two analysis workers sharing a stream, chunked
# bodies under gunicorn), the suite's own leftover check (a child pytest run twice) and the
# simulated release regression (a minute of simulation): ~13 minutes. CI runs it after `make test`.
FAULTS_TESTS := tests/reliability tests/agentops/test_no_process_survives.py tests/scale/test_bench_smoke.py \
	tests/agentops/test_runstack.py tests/agentops/test_slow_clients.py tests/agentops/test_hostile_tenant.py tests/alerts/test_end_to_end.py \
	tests/alerts/test_delivery_isolation.py \
	tests/analysis/test_worker.py::test_a_worker_killed_mid_analysis_leaves_no_partial_or_duplicate_findings \
	tests/releases/test_simulated_regression.py \
	tests/agentops/test_login.py::test_the_lockout_counts_failures_across_web_workers \
	tests/agentops/test_client.py::test_the_client_reads_a_running_stack \
	tests/analysis/mcp/test_http.py tests/scale/test_two_workers.py \
	tests/ingest/test_chunked_bodies.py::test_chunked_bodies_are_stored_on_every_ingest_endpoint_under_gunicorn
faults: $(STAMP)
	AGENTOPS_FAULTS=1 $(BIN)/python -m pytest $(FAULTS_TESTS) $(PYTEST_ARGS)

# Re-record the agent-framework OTLP fixtures (tests/fixtures/agents/, see its README): real
# frameworks and instrumentations, fully offline, in their own venvs so that .venv (the suite's
# '.[dev]') never gets them: .venv-fixtures ('.[fixtures]') and, for the recorders that declare
# `# fixtures extra: fixtures-openai2` (frameworks still on openai<3), .venv-fixtures-openai2, and
# for `# fixtures extra: fixtures-agents` (CrewAI, Agno), .venv-fixtures-agents; the AI SDK's Node
# recorder installs with npm ci. Every recorder runs in its own process; one with a
# `# content switch: VAR=value ...` line runs again with those set and AGENTOPS_FIXTURES_CONTENT=off,
# into tests/fixtures/agents/content_off/<family>/ (its library's content hidden).
FIXTURES_VENV := .venv-fixtures
FIXTURES_VENV2 := .venv-fixtures-openai2
FIXTURES_VENV3 := .venv-fixtures-agents
FIXTURES_NODE := tests/fixtures/agents/record/ai_sdk
fixtures:
	@test -x $(FIXTURES_VENV)/bin/python || $(PYTHON) -m venv $(FIXTURES_VENV)
	$(FIXTURES_VENV)/bin/python -m pip install -q --upgrade pip
	$(FIXTURES_VENV)/bin/python -m pip install -q -e '.[fixtures]' opentelemetry-exporter-otlp-proto-http
	@test -x $(FIXTURES_VENV2)/bin/python || $(PYTHON) -m venv $(FIXTURES_VENV2)
	$(FIXTURES_VENV2)/bin/python -m pip install -q --upgrade pip
	@# The extra's packages without agentops itself: Strands pins mcp<2.2, agentops needs mcp>=2.3,
	@# and the recorders import nothing of agentops (run from the repository root).
	$(FIXTURES_VENV2)/bin/python -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['fixtures-openai2']))" > $(FIXTURES_VENV2)/requirements.txt
	$(FIXTURES_VENV2)/bin/python -m pip install -q -r $(FIXTURES_VENV2)/requirements.txt
	@test -x $(FIXTURES_VENV3)/bin/python || $(PYTHON) -m venv $(FIXTURES_VENV3)
	$(FIXTURES_VENV3)/bin/python -m pip install -q --upgrade pip
	$(FIXTURES_VENV3)/bin/python -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['fixtures-agents']))" > $(FIXTURES_VENV3)/requirements.txt
	$(FIXTURES_VENV3)/bin/python -m pip install -q -r $(FIXTURES_VENV3)/requirements.txt
	npm ci --no-audit --no-fund --prefix $(FIXTURES_NODE)
	@set -e; for f in $$(grep -l '^if __name__ == "__main__":' tests/fixtures/agents/record/*.py); do \
	  m=$$(basename $$f .py); case $$m in capture|__init__) continue;; esac; \
	  venv=$(FIXTURES_VENV); grep -q '^# fixtures extra: fixtures-openai2' $$f && venv=$(FIXTURES_VENV2); \
	  grep -q '^# fixtures extra: fixtures-agents' $$f && venv=$(FIXTURES_VENV3); \
	  echo "== $$m ($$venv)"; $$venv/bin/python -m tests.fixtures.agents.record.$$m; \
	  sw=$$(sed -n 's/^# content switch: //p' $$f | sed 's/ (.*//'); if [ -n "$$sw" ]; then \
	    echo "== $$m, content off: $$sw"; env $$sw AGENTOPS_FIXTURES_CONTENT=off $$venv/bin/python -m tests.fixtures.agents.record.$$m; \
	  fi; done

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .data
