# The two Quickstart commands. Each creates .venv on first use and reinstalls only when
# pyproject.toml changes.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench docs docs-build clean

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

# The suite's temporary files (pytest's tmp_path, anything made through tempfile) go to a
# folder of this run, removed at the end whatever the result: nothing is left in /tmp.
test: $(VENV)/.stamp-test
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/gyre-test.XXXXXX") && \
	TMPDIR="$$tmp" $(BIN)/python -m pytest -q -n 2 --durations=10; \
	status=$$?; rm -rf "$$tmp"; exit $$status

# The documentation site (mkdocs.yml, docs/): served at http://127.0.0.1:8000, or built into site/.
docs: $(VENV)/.stamp-test
	$(BIN)/mkdocs serve

docs-build: $(VENV)/.stamp-test
	$(BIN)/mkdocs build --strict

bench: $(VENV)/.stamp-test
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .jax_cache runs site
