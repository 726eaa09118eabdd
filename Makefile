# rollout-proxy: every command a person or CI needs. `make test` and `make demo` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-core-dev

.PHONY: venv test unit lint demo bench clean

venv: $(STAMP)

# Rebuilt only when the dependency list changes; a no-op (well under a second) otherwise.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo ">> installing rollout-proxy with dev extras into $(VENV) (first time takes about a minute)"
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy .

test: venv lint
	$(PY) -m pytest

unit: venv
	$(PY) -m pytest tests/unit

demo: venv
	$(PY) -m benchmarks.demo

# Every suite, quick grid; JSON and PNG charts into bench-out/. `python -m benchmarks --help`.
bench: venv
	for suite in policy routing sync overhead; do \
		$(PY) -m benchmarks $$suite --quick --json bench-out/$$suite.json --plot bench-out || exit 1; \
	done

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
