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

# The suite in two runs. Everything but tests/runtime runs in two pytest processes
# (pytest-xdist; each test has its own SQLite file or PostgreSQL database, so any two can run
# at once): 13.8 min in a CI run on two cores, where the whole suite in one process had taken
# an estimated 40 of CI's 46 minutes. tests/runtime (real worker processes SIGKILLed, stopped,
# starved) then runs in one process: its bounds (a killed worker's jobs recovered within
# lease + sweep + 1 s) hold on a machine doing only that, and a second test beside it starves
# its workers (measured: 6.5 s against a 4 s bound).
# PYTEST_WORKERS=0 runs the first part in one process too; PYTEST_ARGS goes to both runs
# (exit status 5, "no tests collected" by a -k filter, is not a failure).
PYTEST_WORKERS ?= 2
PYTEST := $(VENV)/bin/pytest
unit: $(STAMP)
	$(PYTEST) -n $(PYTEST_WORKERS) --ignore=tests/runtime $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PYTEST) tests/runtime $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The suite without the long fault tests (tests/runtime: real crashes, signals, chaos).
unit-fast: $(STAMP)
	$(PYTEST) -n $(PYTEST_WORKERS) --ignore=tests/runtime $(PYTEST_ARGS)

# The documentation site, into site/ (open site/index.html); --strict: a warning fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

test: lint typecheck docs unit

# What a developer runs between edits: everything but the few tests that take minutes
# (marked heavy: the benchmarks' smoke runs and the SIGKILL chaos figures), which CI runs.
test-fast: $(STAMP)
	$(MAKE) lint typecheck
	$(PYTEST) -n $(PYTEST_WORKERS) -m "not heavy" --ignore=tests/runtime $(PYTEST_ARGS) \
		|| [ $$? -eq 5 ]
	$(PYTEST) -m "not heavy" tests/runtime $(PYTEST_ARGS) || [ $$? -eq 5 ]

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
