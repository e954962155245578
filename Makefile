# The two Quickstart commands. Each creates .venv on first use and reinstalls only when
# pyproject.toml changes.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "gyre needs Python >= 3.11, found " + sys.version'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.stamp-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[examples]"
	touch $@

$(VENV)/.stamp-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev,examples]"
	touch $@

demo: $(VENV)/.stamp-demo
	$(BIN)/gyre fit

test: $(VENV)/.stamp-test
	$(BIN)/python -m pytest -q -n 2 --durations=10

bench: $(VENV)/.stamp-test
	$(BIN)/python benchmarks/loop_overhead.py

clean:
	rm -rf $(VENV) .jax_cache runs
