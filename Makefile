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
# new one's first checkpoint is saved); it ends with the package it made measured beside
# CTranslate2 on the same weights (bench --frontier: test BLEU, size, speed), written beside
# the run, not into it
demo: $(STAMP)
	$(VENV)/bin/edgeformer train --preset tiny --out runs/demo --force
	$(VENV)/bin/edgeformer export runs/demo/best runs/demo/package --quantize int8,int4 --force
	$(VENV)/bin/edgeformer translate runs/demo/package "A man is riding a bike." "Two dogs play in the snow." "A woman in a red dress is singing on a stage."
	$(VENV)/bin/edgeformer bench --frontier demo=runs/demo/package --quick --out runs/demo-bench \
		--stacks edgeformer-fp32,edgeformer-int8,edgeformer-int4,ct2-fp32,ct2-int8

# The bundled packages (runtime/pretrained/: installed with edgeformer, docs/pretrained.md),
# trained from the committed recipes into runs/models/ and exported over the committed ones.
# M30K_PRESET / M30K_EPOCHS: the committed translator's recipe (its 10 epochs: 25 min on 2 idle
# cores); M30K_PRESET=multi30k-en-de-cpu-long M30K_EPOCHS=40 makes the better one (79 min). Then
# their quality: test BLEU beside CTranslate2, and the LM's validation loss.
M30K_PRESET ?= multi30k-en-de-cpu
M30K_EPOCHS ?= 10
models: $(STAMP)
	$(VENV)/bin/edgeformer train --preset $(M30K_PRESET) --epochs $(M30K_EPOCHS) \
		--out runs/models/m30k-en-de --force
	$(VENV)/bin/edgeformer export runs/models/m30k-en-de/best runtime/pretrained/m30k-en-de \
		--quantize int8-dynamic --force
	$(VENV)/bin/edgeformer train --preset shakespeare-char-cpu --out runs/models/shakespeare --force
	$(VENV)/bin/edgeformer export runs/models/shakespeare runtime/pretrained/shakespeare --force
	$(VENV)/bin/edgeformer bench --frontier m30k-en-de=runtime/pretrained/m30k-en-de \
		--stacks edgeformer-fp32,edgeformer-int8-dynamic,ct2-fp32,ct2-int8 --out runs/models/bench
	$(VENV)/bin/edgeformer train --evaluate runs/models/shakespeare/best

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

.PHONY: venv demo models test js
