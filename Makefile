# One environment for everything: `make demo` and `make test` create it on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean schemas

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m reconciler.demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup

lint: $(STAMP)
	$(VENV)/bin/ruff check reconciler tests benchmarks
	$(VENV)/bin/mypy reconciler

schemas: $(STAMP)
	$(PY) -m reconciler.schemagen

bench: $(STAMP)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
