# halo: the two commands of the README (make demo, make test) and their set-up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages the test suite uses for real (installed when run as root and missing).
DEB_PACKAGES := openssh-server openssh-client iproute2 procps iputils-ping ethtool iperf3 sockperf \
	qperf perftest prometheus prometheus-node-exporter chromium cmake g++ ninja-build libibverbs-dev rsync socat
# torch for bench collective/tp: the CPU build (a plain "torch" requirement would pull a CUDA
# build of several GB); installed first so that the extras' "torch>=2.4" is already met.
TORCH := torch==2.13.0

.PHONY: demo test suite lint typecheck unit test-durations test-coverage deb-packages engine \
	llama-cpp python39 bench clean

demo: deb-packages $(VENV)/.installed-all engine llama-cpp
	$(BIN)/halo demo

test: deb-packages $(VENV)/.installed-test engine llama-cpp python39 lint typecheck suite

# The suite's three tiers (docs/testing.md): unit, lab, engine. Two workers: the *_lab.py files
# in two chains, each on one worker, one test after another; the unit files wherever a worker
# is free (tests/parallel.py).
PARALLEL := -n 2 --dist loadgroup
TIMING := build/suite-timing.json

# every tier: what make test and CI run
suite: $(VENV)/.installed-test
	$(BIN)/python -m pytest $(PARALLEL)

# the unit tier alone: the fast loop (no root, no lab, no engine server)
unit: $(VENV)/.installed-test
	$(BIN)/python -m pytest -m unit $(PARALLEL)

# every tier, timed: benchmarks/results/test_suite.json (where the minutes go, per tier,
# file, fixture and halo command; the run kept beside the last ones)
test-durations: deb-packages $(VENV)/.installed-test engine llama-cpp python39
	mkdir -p build
	$(BIN)/python -m pytest $(PARALLEL) --suite-timing $(TIMING); status=$$?; \
	  $(BIN)/python tools/test_suite.py record $(TIMING) && exit $$status

# every tier under coverage.py, halo's own subprocesses too ([run] patch = subprocess):
# the line coverage of src/halo_cluster, as coverage.after in test_suite.json
test-coverage: deb-packages $(VENV)/.installed-test engine llama-cpp python39
	rm -rf build/coverage && mkdir -p build/coverage
	export HALO_COVERAGE_DIR=$(CURDIR)/build/coverage; \
	$(BIN)/python -m coverage run --rcfile=tools/coverage.ini -m pytest $(PARALLEL); \
	  status=$$?; $(BIN)/python -m coverage combine --rcfile=tools/coverage.ini -q && \
	  pct=$$($(BIN)/python -m coverage report --rcfile=tools/coverage.ini --format=total \
	    --precision=2) && $(BIN)/python tools/test_suite.py coverage after $$pct && exit $$status

# The engine environment (.venv-engine): vLLM's CPU build, torch (CPU), Ray and halo's
# adapter (engine/vllm_cpu_ray), every package pinned. Built once into a cache outside the
# clone (~/.cache/halo, or $$HALO_CACHE) keyed by its pins, and reused; prints its time and size.
engine:
	bash engine/build-env.sh $(PYTHON)

# The second engine (.llama-cpp): llama.cpp's ggml-rpc-server, llama-server and llama-bench,
# built for the CPU with RPC on from the llama.cpp tree vendored in a pinned llama-cpp-python
# source distribution. Cached like the engine environment, keyed by the pin; ~6 min once.
llama-cpp: deb-packages | $(VENV)/bin/python
	bash engine/llama_cpp/build.sh $(BIN)/python

# A real CPython 3.9 (Debian 11's packages, pinned by sha256, unpacked into ~/.cache/halo):
# the oldest Python halo's node side supports, which the tests run it on.
python39:
	bash engine/python39/fetch.sh >/dev/null

# ruff lints the node side's modules as Python 3.9 (pyproject.toml's per-file-target-version);
# node_py39.py checks that table against what node/main.py imports, and what ruff cannot see.
lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks engine tools
	$(BIN)/python tools/node_py39.py
	$(BIN)/lint-imports --no-cache

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/bench_inventory.py
	$(BIN)/python benchmarks/bench_exporter.py
	if [ "$$(id -u)" = 0 ]; then $(BIN)/python benchmarks/bench_lab.py && $(BIN)/python benchmarks/bench_up.py; fi

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-torch: | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet '$(TORCH)' || \
	  $(BIN)/python -m pip install --quiet '$(TORCH)' --index-url https://download.pytorch.org/whl/cpu
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-torch | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

$(VENV)/.installed-all: pyproject.toml $(VENV)/.installed-torch | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[all,test]'
	touch $@

# As root on Debian/Ubuntu, install what is missing; otherwise say what the lab tests lack.
deb-packages:
	@missing=""; for pkg in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else \
	  echo "note: missing Debian packages ($$missing); tests that need them will skip"; \
	fi

clean:
	rm -rf $(VENV) .venv-engine .llama-cpp .pytest_cache .mypy_cache .ruff_cache .hypothesis build
