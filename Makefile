# Two commands matter (see README): `make demo` and `make test`. Both build .venv themselves:
# `make demo` installs only what the project needs to run; `make test` (and lint, typecheck, bench)
# add the `dev` extra (pytest, moto, ruff, mypy, ...).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: venv venv-run demo demo-core test test-fast spark-cds lint typecheck docs bench proto clean

# Packages are installed by uv (from PyPI, into the venv, the same resolution as pip's): a fresh
# install of the dev extra takes ~57 s where pip took ~110 s of CI's 15-minute budget.
# --compile-bytecode as pip does: with PYTHONDONTWRITEBYTECODE set (some CI machines), every test
# subprocess would otherwise compile the packages it imports again.
INSTALL := $(BIN)/python -m uv pip install -q --compile-bytecode --python $(BIN)/python

$(BIN)/python:
	@echo "make: creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv

$(RUN_STAMP): pyproject.toml setup.py lakefs_core/format/_fastpath.pyx lakefs_core/block/_localput.pyx | $(BIN)/python
	@echo "make: installing lakefs-open and its runtime dependencies into $(VENV) (about a minute the first time)"
	$(INSTALL) -e .
	touch $(RUN_STAMP)

$(DEV_STAMP): pyproject.toml setup.py lakefs_core/format/_fastpath.pyx lakefs_core/block/_localput.pyx | $(BIN)/python
	@echo "make: installing lakefs-open with the test tool chain (extra 'dev') into $(VENV)"
	$(INSTALL) -e '.[dev]'
	touch $(DEV_STAMP) $(RUN_STAMP)

venv-run: $(RUN_STAMP)

venv: $(DEV_STAMP)

# DEMO_KEEP=DIR keeps the demo's directory (configs, KV stores, namespaces) instead of a temporary one.
demo: venv-run
	$(BIN)/python -m lakefs_mirror.demo $(if $(DEMO_KEEP),--dir $(DEMO_KEEP))

demo-core: venv-run
	$(BIN)/python -m lakefs_core.demo

# Tests run in TEST_WORKERS pytest-xdist processes, a test file per worker at a time (its module
# fixtures stay in one process), in collection order, longest first: the files that take minutes
# (tests/conftest.py, SLOW_FILES_FIRST), then the e2e, integration and unit tiers, so the run ends on
# files of seconds with both workers busy; TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q --durations=20 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# The project's own bytecode first: the editable install leaves it to the first import, and with
# PYTHONDONTWRITEBYTECODE set (CI) every process a test starts (hundreds of lakefs-gc, lakefs-core
# and daemon processes) compiled the ~110 modules it imports again, ~0.23 s of CPU each (a lite
# `lakefs-gc mark` 1.0 -> 0.77 s). compileall writes whatever that variable says and skips what is
# up to date (~1.5 s of CPU on a fresh clone).
BYTECODE := $(BIN)/python -m compileall -q -j 0 lakefs_core lakefs_mirror lakefs_gc lakefs_server tests

test: venv
	$(BYTECODE)
	$(PYTEST)

test-fast: venv
	$(BYTECODE)
	$(PYTEST) -m "not e2e and not slow and not spark"

# The test JVMs' class-data sharing archive (.venv/spark-cds.jsa), rebuilt: a test run whose selection
# has Spark tests builds it in the background when it is missing (tests/support/spark_jvm.py).
spark-cds: venv
	$(BIN)/python -m tests.support.spark_jvm

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check lakefs_core lakefs_mirror lakefs_gc lakefs_server
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into site/; --strict: a broken link or anchor fails.
docs: venv
	$(BIN)/mkdocs build --strict --site-dir site

bench: venv
	$(BIN)/python -m bench.run_all

proto: venv
	bash scripts/gen_proto.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
