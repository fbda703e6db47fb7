# Developer entry points. `make test` is what CI runs (.ci/run); it must work on
# a fresh clone with nothing but python3 (>= 3.11) and network access to PyPI.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Reinstall only when the dependency declaration changes, not on every run.
STAMP  := $(VENV)/.installed-pyproject
# setuptools' editable-install notices are warnings, not errors: keep pip quiet.
PIP    := PYTHONWARNINGS=ignore $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: venv native tools lint check test golden demo schemas proto lock release-pin release-manifests bench bench-quick bench-core bench-replay \
  bench-memory bench-pipeline bench-latency bench-slim bench-faust bench-kmsg bench-autoscaler \
  bench-backlog

# .venv with the project installed editable, its test, demo and bench extras.
venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e '.[test,demo,bench]'
	@touch $@

# The correlation core and the router (schemas/keys.py) compiled with mypyc
# (schemas/native.py says why and how it is guarded): rebuilt when a source changes.
# Without a C compiler the build fails, says so, and the Python sources run: slower, the
# same incidents.
NATIVE := schemas/.native-digest
native: $(NATIVE)

# Its inputs: the core, the schemas (the router is one of them; the others are what it is
# compiled against: schemas/native.py, inputs), and the build's own modules.
NATIVE_INPUTS := $(wildcard streams/__init__.py streams/core/*.py streams/core/rules/*.py schemas/*.py) \
  streams/native_build.py pyproject.toml
$(NATIVE): $(STAMP) $(NATIVE_INPUTS)
	@GPUTRIAGE_PURE_PYTHON=1 $(BIN)/python -m streams.native_build build \
	  || { $(BIN)/python -m streams.native_build clean; \
	       echo "make native: compiling the core FAILED: the Python sources run (slower)"; \
	       test "$$GPUTRIAGE_REQUIRE_NATIVE" != 1; }

# ruff (lint and format check), mypy strict, and the import contracts (pyproject.toml).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Test tools from Debian's packages, where apt-get runs as root (CI, the dev machines):
# the Alertmanager bridge's tests post to a real Alertmanager, the PromQL baseline (bench/promql)
# and the PrometheusRule (tests/deploy) use a real Prometheus and promtool, the manifest tests
# render the overlays with kubectl's kustomize (`kubectl` is in the apt sources of these
# machines, not in Debian's own). One `apt-get update`, then every missing package in one
# install, and one by one if that fails (a package no source has must not cost the others);
# elsewhere the tests that need them skip, saying why.
APT_PACKAGES := prometheus-alertmanager prometheus kubectl

tools:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "apt-get install$$missing"; \
	  apt-get update -qq || true; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing \
	    >/dev/null 2>&1 || for p in $$missing; do \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$p \
	        >/dev/null 2>&1 || echo "make tools: installing $$p FAILED: the tests that need it will skip"; \
	    done; \
	else echo "make tools: cannot install$$missing (no apt-get as root): their tests skip"; fi

# The quick loop while working: lint, then the tests marked neither e2e (a real broker,
# Alertmanager or promtool, or a subprocess) nor slow (tests/conftest.py marks both). Under
# a minute on 2 cores once mypy's cache is warm; `make test` still runs everything.
CHECK_WORKERS ?= 2
check: venv native lint
	$(BIN)/pytest -n $(CHECK_WORKERS) -m "not e2e and not slow"

# Everything, e2e and slow included (the markers only select): the lint, then the suite in
# TEST_WORKERS processes, each with its own embedded broker (tests/conftest.py): most of a
# test's time is waiting (group joins, subprocesses, the broker), so more
# processes than cores pay. worksteal: the long kill tests do not hold up the end.
# `make test TEST_WORKERS=0` runs it in this process (one broker, plain output).
TEST_WORKERS ?= 4
test: venv native lint tools
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal

# Every command's --help, pinned in tests/cli/golden/help/ (tests/cli/test_help_golden.py):
# after a meant change to what a command shows, rewrite the files, then review their diff.
golden: venv
	GPUTRIAGE_UPDATE_GOLDEN=1 $(BIN)/python -m pytest tests/cli/test_help_golden.py -q -n 0

# The bundled scenario through an embedded broker and a worker, incidents printed.
demo: venv native
	$(BIN)/gputriage demo

# Rewrites the JSON Schema document of every topic (schemas/jsonschema/) from the record types.
schemas: venv
	$(BIN)/gputriage schemas --write

# The kubelet pod-resources stubs (connectors/podresources/_proto/README.md: from which
# upstream commit), regenerated from the committed api.proto with the venv's grpcio-tools.
PROTO := connectors/podresources/_proto/api.proto
proto: venv
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m grpc_tools.protoc -I . \
	  --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. $(PROTO)

# deploy/requirements.lock: what the image installs, every version pinned and every file's hash
# listed (deploy/Dockerfile installs it with --require-hashes): pyproject.toml's runtime
# dependencies and the build stage's tools (deploy/requirements-build.in). Compiled for the
# image's Python (3.11, Linux) from PyPI alone: the machine's pip configuration (extra
# indexes, local wheels) is ignored, so a local rebuild of a wheel cannot add its hash. An
# existing pin is kept; `make lock LOCK_FLAGS=--upgrade` moves every pin to the newest allowed.
# tests/deploy/test_lock.py fails when pyproject.toml asks for what the lock does not hold.
PIP_TOOLS  := pip-tools==7.6.2
LOCK_VENV  := .venv-lock
LOCK_PIP   := env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null
LOCK_INDEX := https://pypi.org/simple
LOCK_FLAGS ?=
lock:
	@test -x $(LOCK_VENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_VENV) \
	  && $(LOCK_PIP) $(LOCK_VENV)/bin/python -m pip install -q --index-url $(LOCK_INDEX) '$(PIP_TOOLS)'; }
	@$(LOCK_VENV)/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11) and \
	  "make lock: the image runs Python 3.11; run it with PYTHON=python3.11")'
	$(LOCK_PIP) $(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe \
	  --strip-extras --no-emit-index-url --index-url $(LOCK_INDEX) $(LOCK_FLAGS) \
	  --output-file deploy/requirements.lock pyproject.toml deploy/requirements-build.in

# The release's manifests (deploy/release.py): after pushing the image built from
# deploy/Dockerfile, pin the production overlay to the digest the registry returned
# (`docker buildx build --push --metadata-file m.json`, its containerimage.digest), then
# render the overlay, refused while any image is not pinned by digest.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
release-pin: venv
	@test -n "$(IMAGE_DIGEST)" || { echo "make release-pin IMAGE_DIGEST=sha256:..."; exit 2; }
	$(BIN)/python deploy/release.py pin "$(IMAGE_DIGEST)"

release-manifests: venv
	$(BIN)/python deploy/release.py render dist/gputriage-$(VERSION).yaml

# Every benchmark, then bench/REPORT.md and bench/figures/*.png (bench/report/; matplotlib
# is the `bench` extra, which `make venv` installs): under 15 minutes on 2 quiet cores.
bench: venv native
	$(BIN)/python -m bench.report --via "make bench"

# The same at tiny sizes (under a minute): the report's shape, not its figures. Written
# under bench/out/quick/ (git-ignored), never over the real report.
bench-quick: venv native
	$(BIN)/python -m bench.report --quick --via "make bench-quick" \
	  --report bench/out/quick/REPORT.md --raw-dir bench/out/quick/raw

# The correlation core alone (what `make bench` ran before the report): 1M events, 5,000 nodes.
bench-core: venv native
	$(BIN)/python bench/core_bench.py

# `gputriage replay` as a user runs it: events/s and times real time, on the core bench's stream.
bench-replay: venv native
	$(BIN)/python -m bench.replay_bench

# The core's RSS and bytes per tracked pod and GPU, 100 to 5,000 nodes.
bench-memory: venv native
	$(BIN)/python -m bench.memory_scale

# The whole live processor against plain aiokafka on the embedded broker (throughput, latency).
bench-pipeline: venv native
	$(BIN)/python bench/pipeline_bench.py

# p99 latency under load (issue 14.4): 3 runs x 2k and 10k events/s, one worker each.
bench-latency: venv native
	$(BIN)/python -m bench.latency

# Slimming raw pod JSON against decoding it into kubernetes-asyncio models: pods/s, one core.
bench-slim: venv
	$(BIN)/python -m bench.slim_bench

# Kernel-log XID parsing: lines/s on one core.
bench-kmsg: venv
	$(BIN)/python -m bench.kmsg_bench

# Cluster-autoscaler log parsing: lines/s on one core.
bench-autoscaler: venv
	$(BIN)/python -m bench.autoscaler_bench

# A worker's peak memory over a backlog where one partition lags (issue 11.3).
bench-backlog: venv native
	$(BIN)/python -m bench.backlog_memory

# The faust-streaming investigation of issue 3 (bench/faust/FINDINGS.md); needs the extra.
bench-faust: venv
	$(BIN)/python -m bench.faust.throughput
