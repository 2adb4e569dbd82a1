# perdure developer tasks. `make help` lists them.
.DEFAULT_GOAL := help
VENV ?= .venv
BIN := $(VENV)/bin

help: ## List the tasks
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/pytest:
	python3 -m venv $(VENV) && $(BIN)/pip install -e ".[dev,bench]"

install: $(BIN)/pytest ## Create .venv with perdure and its dev dependencies

test: install ## Run the whole test suite (what CI runs)
	$(BIN)/pytest

lint: install ## ruff lint and format check
	$(BIN)/ruff check src tests && $(BIN)/ruff format --check src tests

typecheck: install ## mypy --strict over the package
	$(BIN)/mypy

docs: install ## Serve the documentation site on http://127.0.0.1:8000/ (live reload)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

docs-build: install ## Build the site into site/ with --strict (what CI checks)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

demo: install ## Run the demo on the embedded PostgreSQL
	$(BIN)/perdure demo

dashboard: install ## Serve the dashboard on http://127.0.0.1:8080/ (the embedded database)
	$(BIN)/perdure dashboard

MINUTES ?= 5
chaos: install ## Long chaos run (docs/chaos.md): make chaos MINUTES=10 [SEED=n]
	$(BIN)/python tests/chaos/run.py --minutes $(MINUTES) $(if $(SEED),--seed $(SEED))

soak: install ## Soak: 8 workers at a steady rate (docs/chaos.md): make soak MINUTES=10
	$(BIN)/python bench/soak.py --minutes $(MINUTES)

$(BIN)/dbos:
	python3 -m venv $(VENV) && $(BIN)/pip install -e ".[dev,bench]"

bench: install $(BIN)/dbos ## Benchmark against pgbench, DBOS, pgqrs, Absurd (docs/benchmarks.md)
	$(BIN)/perdure bench --json bench.json

.PHONY: help install test lint typecheck docs docs-build demo dashboard chaos soak bench
