# One target per thing a developer does; .ci/run calls `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# The demo needs only errands and its web extra, not the developer tools (mypy, playwright,
# django…): `make demo` on a fresh clone installs that much; `make test` the rest.
DEMO_STAMP := $(VENV)/.demo-stamp

.PHONY: demo test test-fast lint typecheck docs unit unit-fast bench bench-record bench-peers dist clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev,postgres,web,otel,docs]'
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[web]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/errands demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts bench
	$(VENV)/bin/ruff format --check src tests scripts bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The suite without the long fault tests (tests/runtime: real crashes, signals, chaos).
unit-fast: $(STAMP)
	$(VENV)/bin/pytest --ignore=tests/runtime $(PYTEST_ARGS)

# The documentation site, into site/ (open site/index.html); --strict: a warning fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

test: lint typecheck docs unit

# What a developer runs between edits: everything but the few tests that take minutes
# (marked heavy: the benchmarks' smoke runs and the SIGKILL chaos figures), which CI runs.
test-fast: $(STAMP)
	$(MAKE) lint typecheck
	$(VENV)/bin/pytest -m "not heavy" $(PYTEST_ARGS)

bench: $(STAMP)
	$(VENV)/bin/errands bench

# Runs the bench and appends a dated record (machine, versions, commit) to BENCHMARKS.md.
bench-record: $(STAMP)
	$(PY) scripts/bench.py

# The same workload against huey, litequeue, persist-queue, procrastinate, pgqueuer and RQ
# (then durable steps against DBOS Transact: bench/peers/steps.py),
# each installed from PyPI into its own venv under bench/.venvs/; writes bench/results/.
bench-peers: $(STAMP)
	$(PY) bench/peers/run.py
	$(PY) bench/peers/steps.py

# The sdist and wheel (dist/errands-VERSION*) to install errands into your own project:
# pip install 'dist/errands-VERSION-py3-none-any.whl[postgres]' (see README, "In your project").
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) build dist site *.egg-info src/*.egg-info
