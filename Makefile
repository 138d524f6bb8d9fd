# Two commands matter (see README): `make demo` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv demo demo-core test test-fast lint typecheck bench proto clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: venv
	$(BIN)/python -m lakefs_mirror.demo

demo-core: venv
	$(BIN)/python -m lakefs_core.demo

test: venv
	$(BIN)/python -m pytest -q

test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow and not spark"

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check lakefs_core lakefs_mirror lakefs_gc

typecheck: venv
	$(BIN)/mypy

bench: venv
	$(BIN)/python -m bench.run_all

proto: venv
	bash scripts/gen_proto.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
