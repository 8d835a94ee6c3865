# Strata's front door. `make run` serves the embedded mode (no servers needed);
# `make test` installs what the tests need and runs them (PostgreSQL and Redis on localhost).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
LOCOMO ?= ../shared/bench/locomo/locomo10.json
LONGMEMEVAL ?= ../shared/bench/longmemeval/longmemeval_s_cleaned_498.json.xz

.PHONY: install run worker test check fmt openapi bench bench-recall bench-scale bench-scale-quick clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

run: install  ## the service, embedded (SQLite, Qdrant Edge, in-process buffer and worker)
	$(BIN)/uvicorn --factory app.main:create_app --host $(HOST) --port $(PORT)

worker: install  ## the promotion worker as its own process (full stack)
	$(BIN)/python -m app.worker

test: install
	$(BIN)/pytest

check: install  ## format check, lint, mypy --strict, tests
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest

fmt: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

openapi: install
	$(BIN)/python -m app.openapi > openapi/openapi.json

bench: install  ## service levels and LoCoMo retrieval, on a fresh embedded server
	bash bench/run.sh $(LOCOMO)

bench-recall: install  ## the bilingual development set and LongMemEval_S (100 questions)
	SUITES="bilingual longmemeval" LONGMEMEVAL=$(LONGMEMEVAL) bash bench/run.sh

bench-scale: install  ## recall and context at 1k/10k/100k memories, 1/8/16 clients (bench/README.md)
	$(BIN)/python bench/scale.py --build-index $(SCALE_ARGS)

bench-scale-quick: install  ## the same at 1k and 10k, 1 and 8 clients: under 5 minutes
	$(BIN)/python bench/scale.py --build-index --quick $(SCALE_ARGS)

clean:
	rm -rf $(VENV) data .mypy_cache .ruff_cache .pytest_cache .hypothesis
