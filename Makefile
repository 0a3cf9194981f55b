# Two commands: `make run` (the platform on the embedded default) and `make test` (the suite).
# Both create .venv and install the locked dependencies first; nothing else is needed but
# python3, pip and make.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
UV_VERSION := 0.13.9

.PHONY: setup run test lint bench lock clean chromium postgres

setup: $(STAMP)

# Bytecode is compiled at install, as pip does and uv does not by default: every `lake` command,
# server and Dagster worker is a fresh process, and one that compiles what it imports (as it must
# where PYTHONDONTWRITEBYTECODE is set, or the venv is read-only) takes twice as long to start.
$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "uv==$(UV_VERSION)"
	$(UV) pip sync -q --compile-bytecode --python $(PY) requirements.lock
	$(UV) pip install -q --python $(PY) --no-deps -e .
	$(PY) -m compileall -q -j 0 lake_platform
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/lake up

# Two pytest-xdist workers, each taking whole test files (a file's module fixtures, a built lake
# or a started server, are made once): about a third of the suite's time is spent waiting on
# servers and subprocesses, which the other worker fills. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: $(STAMP) chromium postgres lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# ruff's rules and line length are in pyproject.toml; the formatter keeps the tree in one style.
LINTED := lake_platform lake_platform_tests bench
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

# The browser check of the Dagster UI (lake_platform_tests/up/test_launcher.py) drives Debian's
# chromium headless; install it when missing (CI runs as root).
chromium:
	@command -v chromium >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)

# The Dagster tests also run on a throwaway PostgreSQL cluster (lake_platform_tests/postgres.py
# starts it with Debian's initdb/postgres, kept under /usr/lib/postgresql/<major>/bin); install
# the package when missing (CI runs as root).
postgres:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql)

bench: $(STAMP)
	$(PY) bench/ingest.py
	$(PY) bench/commits.py
	$(PY) bench/flight.py
	$(PY) bench/orphans.py
	$(PY) bench/cli.py
	$(PY) bench/startup.py
	$(PY) bench/metrics.py
	$(PY) bench/indexes.py
	$(PY) bench/evolution.py
	$(PY) bench/rest.py
	$(PY) bench/rest_requests.py
	$(PY) bench/compaction.py --rows 200000 --target 2000000

# Re-resolve the lock after changing pyproject.toml (needs the network; commit the result).
lock: $(STAMP)
	$(UV) pip compile pyproject.toml --extra dev --universal --python-version 3.11 -q -o requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache
