# The two commands: `make dev` and `make test`. Both build the virtual environment first, with every
# extra (the test extra pulls in dev and postgres).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev test test-fast typecheck lint bench bench-peers bench-ab clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The dev server (API + Studio at http://127.0.0.1:8787, hot reload) on the bundled voice-calls
# example, on embedded SQLite at examples/voice/.duro/dev.db. Ctrl-C stops it.
dev: $(STAMP)
	$(BIN)/duro dev examples/voice

lint: $(STAMP)
	$(BIN)/ruff check sdk devserver harness tests examples bench templates
	$(BIN)/ruff format --check sdk devserver harness tests examples bench templates

test: $(STAMP) lint typecheck
	bash scripts/install-system-deps.sh
	$(BIN)/pytest
	# the FastAPI example's tests again under pytest-asyncio's auto mode, as many FastAPI projects run
	$(BIN)/pytest examples/fastapi_chat -o asyncio_mode=auto

# Unit and SQLite integration tests (and the examples' own), a few minutes: no PostgreSQL server,
# no chaos, no e2e (live servers, the browser), so no system packages either.
test-fast: $(STAMP) lint
	$(BIN)/pytest -m "not postgres" --ignore=tests/e2e --ignore=tests/chaos

# mypy, strict on the SDK, the dev server and the harness ([tool.mypy] in pyproject.toml); part of
# `make test`.
typecheck: $(STAMP)
	$(BIN)/mypy

# The headline suites (core, quota, limits, harness; 20 minutes or more with Prefect); figures and method in BENCHMARKS.md.
bench: $(STAMP)
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
bench-ab: $(STAMP)
	$(BIN)/python bench/ab.py --base $(BASE) --json bench/results/ab.json

clean:
	rm -rf $(VENV) build dist *.egg-info
