# Developer entry points. `make test` is what CI runs (.ci/run); it must work on
# a fresh clone with nothing but python3 (>= 3.11) and network access to PyPI.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Reinstall only when the dependency declaration changes, not on every run.
STAMP  := $(VENV)/.installed-pyproject
# setuptools' editable-install notices are warnings, not errors: keep pip quiet.
PIP    := PYTHONWARNINGS=ignore $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: venv lint test demo schemas bench bench-pipeline bench-slim bench-faust bench-kmsg

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e '.[test,demo]'
	@touch $@

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: venv lint
	$(BIN)/pytest

demo: venv
	$(BIN)/gputriage demo

schemas: venv
	$(BIN)/gputriage schemas --write

bench: venv
	$(BIN)/python bench/core_bench.py

bench-pipeline: venv
	$(BIN)/python bench/pipeline_bench.py

bench-slim: venv
	$(BIN)/python -m bench.slim_bench

bench-kmsg: venv
	$(BIN)/python -m bench.kmsg_bench

# The faust-streaming investigation of issue 3 (bench/faust/FINDINGS.md); needs the extra.
bench-faust: venv
	$(PIP) install -e '.[test,demo,faust]'
	$(BIN)/python -m bench.faust.throughput
