# The two commands: `make dev` and `make test`. Both build the virtual environment first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# Until the dev server lands: run the bundled example's main job to completion on embedded SQLite.
dev: $(STAMP)
	$(BIN)/python examples/orders/run.py

lint: $(STAMP)
	$(BIN)/ruff check sdk devserver harness tests examples bench

test: $(STAMP) lint
	bash scripts/install-system-deps.sh
	$(BIN)/pytest

# Every benchmark (about 12 minutes); figures and method in BENCHMARKS.md.
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python bench/core.py --json bench/results/core.json
	$(BIN)/python bench/quota.py --json bench/results/quota.json
	$(BIN)/python bench/limits.py --json bench/results/limits.json
	$(BIN)/python bench/harness.py --json bench/results/harness.json

clean:
	rm -rf $(VENV) build *.egg-info
