# The two set-up commands (README): `make demo` runs the main job end to end, `make test` the tests.
# Each creates its own virtual environment in .venv and installs what it needs.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JS_STAMP := runtime/js/node_modules/.installed

$(STAMP): pyproject.toml benchmarks/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[cpu,train,test,dev]" -e ./benchmarks
	touch $(STAMP)

venv: $(STAMP)

# a demo: a second `make demo` trains a new runs/demo (--force: the older run is kept until the
# new one's first checkpoint is saved); the benchmark writes beside the run, not into it
demo: $(STAMP)
	$(VENV)/bin/edgeformer train --preset tiny --out runs/demo --force
	$(VENV)/bin/edgeformer export runs/demo/best runs/demo/package --quantize int8,int4 --force
	$(VENV)/bin/edgeformer translate runs/demo/package "A man is riding a bike." "Two dogs play in the snow." "A woman in a red dress is singing on a stage."
	$(VENV)/bin/edgeformer bench --quick --out runs/demo-bench

# the JavaScript runtime's tests (tests/runtime/test_js.py) run in `make test`: its dependencies come
# first (EDGEFORMER_REQUIRE_JS=1 makes a missing node a failure, not a skip)
test: $(STAMP) $(JS_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tests/typecheck.py
	EDGEFORMER_REQUIRE_JS=1 $(VENV)/bin/python -m pytest -q

# The JavaScript runtime's dependencies (runtime/js, docs/ship-node.md), from its package-lock.json
# (once per lock file; a fresh Debian machine gets Node.js and npm from Debian's packages first,
# when run as root)
$(JS_STAMP): runtime/js/package-lock.json
	@command -v npm >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		echo "make: installing nodejs and npm (Debian)" && apt-get update -q >/dev/null && \
		apt-get install -y -q nodejs npm >/dev/null; } || \
		{ echo "make js: npm not found (install Node.js >= 18 and npm)"; exit 1; }
	@echo "cd runtime/js && npm ci --ignore-scripts --no-audit --no-fund"
	@cd runtime/js && npm ci --ignore-scripts --no-audit --no-fund >/dev/null || { \
		echo "make js: npm ci failed (no network? it needs registry.npmjs.org once)"; exit 1; }
	@touch $(JS_STAMP)

js: $(JS_STAMP)

.PHONY: venv demo test js
