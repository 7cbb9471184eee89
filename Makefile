# Shortcuts over the environment `bash packaging/setup.sh --test` sets up (.venv, or $EMBER_VENV).
VENV ?= $(or $(EMBER_VENV),.venv)
PY ?= $(VENV)/bin/python

.PHONY: test-fast test lint type

# the unit tier: no model, no worker process, under a minute
test-fast:
	$(PY) -m pytest tests/unit -q

# every tier, set up as CI does (the first run pulls the real models into the test home)
test:
	bash packaging/setup.sh --test -q

lint:
	$(PY) -m ruff check .

type:
	$(PY) -m mypy
