# portside: two commands on a fresh machine — `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
XLA_VENV ?= $(HOME)/.cache/portside/xla-venv
export PORTSIDE_XLA_PYTHON ?= $(XLA_VENV)/bin/python

.PHONY: venv xla-venv demo test test-fast test-slow check bench lint clean

venv: $(VENV)/.installed

# torch 2.13.0 (CPU) lies on these machines' disk; elsewhere any torch >= 2.4 from the index.
# pip's build chatter goes to a log that is shown only when an install fails.
$(VENV)/.installed: pyproject.toml
	@echo "portside: installing into $(VENV) (log: $(VENV)/install.log)"
	$(PYTHON) -m venv $(VENV)
	@( echo "portside: [1/3] pip" >&3 && $(PY) -m pip install -q --upgrade pip && \
	   echo "portside: [2/3] torch (the longest step)" >&3 && \
	   ( $(PY) -m pip install -q torch==2.13.0 || $(PY) -m pip install -q "torch>=2.4" ) && \
	   echo "portside: [3/3] portside and its dev dependencies" >&3 && \
	   $(PY) -m pip install -q -e '.[dev,claude-code,ray,thirdparty]' ) 3>&1 > $(VENV)/install.log 2>&1 \
	   || { tail -50 $(VENV)/install.log; echo "portside: install failed, see $(VENV)/install.log"; exit 1; }
	touch $@

# torch_xla 2.9.0 needs torch 2.9.0: its own venv, outside the checkout (about 7 GB, 2 min).
xla-venv:
	@if [ -x tests/xla/make_venv.sh ]; then PORTSIDE_XLA_VENV=$(XLA_VENV) tests/xla/make_venv.sh; fi

# The demo's own exit status says the verdict (0 pass, 1 fail, 130 interrupted): a fail or a
# quit is a normal end of a demo, not a make error; anything else (a crash, 2 usage) is.
demo: venv
	@$(VENV)/bin/portside demo $(DEMO_ARGS); rc=$$?; case $$rc in \
	  0) echo "portside demo: verdict pass";; \
	  1) echo "portside demo: ended, verdict fail (exit 1; \`$(VENV)/bin/portside sessions\` lists it)";; \
	  130) echo "portside demo: interrupted";; \
	  *) exit $$rc;; esac

# Tiers by cost, each announced as it starts (pyproject.toml's markers):
#   test-fast  the unit tier (no process, no torch: tests/unit/conftest.py refuses both) without
#              its slow tests, a tenth of the property tests' examples: the edit loop;
#   test       every test not marked slow or heavy: the unit tier, then processes, screens, the
#              probe, real sandboxed runs of tiny scripts (target: 12 minutes on 2 cores);
#   test-slow  the tests marked slow or heavy: whole sessions with real training, the corpus,
#              torch_xla on XLA:CPU, real agent CLIs, a Ray cluster;
#   check      lint, test and test-slow: what CI runs.
# One test at a time: on these 2-core machines two xdist workers gained little (the runs are
# CPU-bound) and made wall-clock bounds (stall detection, torch imports taking 10 s under load)
# fail. pytest exits 5 when it collected nothing: that is reported, not failed.
PYTEST := $(PY) -m pytest -q -ra
QUICK := -m "not slow and not heavy"
test: venv
	@echo "== portside tests: unit tier (no process, no torch)"
	@$(PYTEST) $(QUICK) tests/unit; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || exit $$rc
	@echo "== portside tests: processes, screens, the probe, sandboxed runs"
	@$(PYTEST) --durations=10 $(QUICK) tests --ignore=tests/unit; \
	  rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

test-slow: venv xla-venv
	@echo "== portside tests: slow tier (whole sessions, corpus, XLA:CPU, agent CLIs, Ray)"
	@$(PYTEST) --durations=15 -m "slow or heavy" tests; \
	  rc=$$?; if [ $$rc -eq 5 ]; then echo "no slow tests collected"; exit 0; fi; exit $$rc

check: lint test test-slow

test-fast: venv
	PORTSIDE_TEST_TIER=fast $(PYTEST) tests/unit $(QUICK)

# Each bench runs as a module of the tests package from the repo root, so it imports the shared
# helpers as `tests.…` (by hand: `.venv/bin/python -m tests.bench.bench_scan`).
bench: venv
	@for b in tests/bench/bench_*.py; do m=$${b%.py}; echo "== $$b"; $(PY) -m $${m//\//.} || exit 1; done

# ruff, mypy, the import contracts (pyproject.toml [tool.importlinter]: no cycle, layers kept),
# and every portside import naming a module that exists (lazy ones too, which mypy let by).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy core store tui cli --explicit-package-bases
	$(VENV)/bin/lint-imports
	$(PY) tests/tools/check_imports.py

clean:
	rm -rf $(VENV) build *.egg-info
