#!/usr/bin/env bash
# One prepared run for a lent GPU box that has torch and Python 3.12 but no vLLM and no network (~4 minutes):
#   1. scripts/device_check.py (re-anchoring's rotation in CUDA layouts, graph replay, ms and syncs per event)
#   2. bench/reanchor.py's event before/after, with a step in flight (the worker thread held, syncs)
#   3. bench/scaling.py: service workers 1 vs 8 on the box's cores, fake engine, 6 load generators
# Here first:   scripts/device_bench.sh --prepare   (pip-downloads the service's wheels into .device-wheels/)
# There:        scripts/device_bench.sh             (run with carry [".device-wheels"]; results under $OUT)
# Where the numbers go: docs/reanchoring.md ("The torch-only device check", "Cost"), docs/benchmarks.md §2 (d).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-.device-wheels}
PY=${DEVICE_PY:-python3}  # the interpreter with torch (the device's own python3)
DEPS=(grpcio grpcio-health-checking grpcio-reflection grpcio-status googleapis-common-protos protobuf structlog
      soxr webrtcvad-wheels prometheus-client numpy)

if [ "${1:-}" = --prepare ]; then
    py=${PYTHON:-.venv/bin/python}
    mkdir -p "$WHEELS"
    # The service's own requirements (pyproject.toml), for the device's interpreter, binary wheels only.
    "$py" -m pip download -q -d "$WHEELS" --only-binary=:all: --python-version "${DEVICE_PYTHON:-3.12}" \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        "${DEPS[@]}"
    du -sh "$WHEELS"  # the device takes at most 64 MiB of carried files
    exit 0
fi

out=${OUT:-/tmp/device-bench}
mkdir -p "$out"
status=0
timeout 200 "$PY" scripts/device_check.py --device "${DEVICE:-cuda}" > "$out/device_check.json" \
    2> "$out/device_check.err" || status=1
timeout 120 "$PY" bench/reanchor.py --skip-engines --skip-micro --device "${DEVICE:-cuda}" --micro-repeats 30 \
    --out "$out" > "$out/reanchor.log" 2>&1 || status=1
venv=$(mktemp -d)/v
"$PY" -m venv "$venv"
"$venv/bin/pip" install -q --no-index --find-links "$WHEELS" "${DEPS[@]}" > "$out/pip.log" 2>&1 || status=1
PYTHONPATH=$PWD:$PWD/clients/python timeout 330 "$venv/bin/python" bench/scaling.py --pairs workers \
    --workers-b "${WORKERS_B:-8}" --fake-levels "${LEVELS:-200,600,1000}" --fake-duration 10 --rounds 1 \
    --load-processes "${LOAD_PROCESSES:-6}" --out "$out/scaling.json" > "$out/scaling.md" 2> "$out/scaling.log" \
    || status=1
cat "$out/scaling.md"
tail -n 20 "$out"/reanchor-*.md 2>/dev/null || true
"$PY" -c "import json, sys; d = json.load(open(sys.argv[1])); print('device check ok:', d['ok'])" \
    "$out/device_check.json" || status=1
exit $status
