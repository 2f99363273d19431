#!/usr/bin/env bash
# One prepared device check (≤ 5 minutes): re-anchoring on a CUDA GPU with the tiny checkpoint.
# Needs the CUDA build of a vLLM of the window, 0.32-0.34 (`pip install -e ".[gpu,dev]"`; the GPU machine cannot download:
# bring a venv or a wheel cache). Runs the GPU parity test and its negative control, then prints which
# attention backend and KV layout the probe found (from the sidecar's reanchor_armed log line).
#   scripts/device_check_reanchor.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-${PYTHON:-.venv/bin/python}}
"$py" - <<'PY'
import torch, vllm
assert torch.cuda.is_available(), "no CUDA device"
print("torch", torch.__version__, "vllm", vllm.__version__, "gpu", torch.cuda.get_device_name(0))
PY
out=${OUT:-/tmp}
timeout 290 "$py" -m pytest tests/gpu/test_reanchor_gpu.py -x -q -rs -p no:cacheprovider -s \
  2>&1 | tee "$out/device_check_reanchor.log" | grep -E "passed|failed|error|reanchor_armed|reanchor_unavailable|SKIP|assert" || true
grep -q " passed" "$out/device_check_reanchor.log" && ! grep -q " failed" "$out/device_check_reanchor.log"
