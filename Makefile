# The two commands: `make dev` and `make test`. Each builds the virtual environment first: `make dev`
# with what the dev server needs (the `dev` extra), `make test` with everything the suite needs (the
# `test` extra: dev, postgres, otel and the tools).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEV_STAMP := $(VENV)/.installed-dev
TEST_STAMP := $(VENV)/.installed-test

.PHONY: dev dev-env test test-fast typecheck lint bench bench-peers bench-ab clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@ $(DEV_STAMP)

# The dev server's environment alone (what `make dev` installs before it serves).
dev-env: $(DEV_STAMP)

# The dev server (API + Studio at http://127.0.0.1:8787, hot reload) on the bundled voice-calls
# example, on embedded SQLite at examples/voice/.duro/dev.db. Ctrl-C stops it.
dev: $(DEV_STAMP)
	$(BIN)/duro dev examples/voice

lint: $(TEST_STAMP)
	$(BIN)/ruff check sdk devserver harness tests examples bench templates
	$(BIN)/ruff format --check sdk devserver harness tests examples bench templates

test: $(TEST_STAMP) lint typecheck
	bash scripts/install-system-deps.sh
	$(BIN)/pytest
	# the FastAPI example's tests again under pytest-asyncio's auto mode, as many FastAPI projects run
	$(BIN)/pytest examples/fastapi_chat -o asyncio_mode=auto

# Unit and SQLite integration tests (and the examples' own), a few minutes: no PostgreSQL server,
# no chaos, no e2e (live servers, the browser), so no system packages either.
test-fast: $(TEST_STAMP) lint
	$(BIN)/pytest -m "not postgres" --ignore=tests/e2e --ignore=tests/chaos

# mypy, strict on the SDK, the dev server and the harness ([tool.mypy] in pyproject.toml); part of
# `make test`.
typecheck: $(TEST_STAMP)
	$(BIN)/mypy

# The headline suites (core, quota, limits, harness; 20 minutes or more with Prefect); figures and method in BENCHMARKS.md.
bench: $(TEST_STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	bash scripts/install-system-deps.sh  # PostgreSQL, for core.py's PostgreSQL cases
	$(BIN)/python bench/core.py --json bench/results/core.json
	$(BIN)/python bench/quota.py --json bench/results/quota.json
	$(BIN)/python bench/limits.py --json bench/results/limits.json
	$(BIN)/python bench/harness.py --json bench/results/harness.json

# The peers' own virtual environments (bench/.venvs/, gitignored): Prefect 3 for bench/limits.py.
bench-peers:
	PYTHON=$(PYTHON) bash bench/peers/setup_prefect.sh

# The hot paths of BASE (default b682bd8) against the checkout, interleaved (bench/ab.py).
BASE ?= b682bd8
bench-ab: $(TEST_STAMP)
	$(BIN)/python bench/ab.py --base $(BASE) --json bench/results/ab.json

clean:
	rm -rf $(VENV) build dist *.egg-info
