#!/usr/bin/env bash
# GPU sweep recipe: the published LinTO methodology on one GPU box, through voxgate.
#
#   Not yet run on a GPU (none was lent while it was written). Its plumbing runs in CI on the
#   CPU with the tiny checkpoint (NO_GPU=1, tests/engine/test_gpu_recipe_cpu.py); the GPU parts
#   (nvidia-smi sampling, the real checkpoint, the preset) have not run. Expect to fix details.
#
# Usage:
#   bench/gpu_recipe.sh quick  MODEL_DIR   # <= 5 min: levels 1,4,8,12,16 x 30 s (for a short GPU lease)
#   bench/gpu_recipe.sh sweep  MODEL_DIR   # 1..N desynchronized sessions, 240 s per step, until real time is lost
#   bench/gpu_recipe.sh long   MODEL_DIR [N] [HOURS]   # N sessions (default 8) for HOURS (default 4):
#                                                       # re-anchoring on (the default), VRAM and KV flatness
#   bench/gpu_recipe.sh frontends MODEL_DIR  # the front-end ceiling: the same sweep (LEVELS, default
#                                            # 16..256 x 60 s) with K = 1, 2, 4 front ends on the one engine
#                                            # core (FRONTENDS="1 2 4"; --engine-option frontends=K, with
#                                            # --workers K so the service is not the ceiling); streams held per K
#
# What it records (under bench/results/gpu-<mode>-<stamp>/): bench.json + PNGs from `voxgate bench`
# (time to first result, end of audio -> final, wall/audio per session, lag over time, errors, CPU/RSS per
# process), vram.csv (nvidia-smi every 5 s: memory.used, utilization) and metrics.txt (the server's
# Prometheus metrics at the end: engine KV usage, rollovers, rut/freeze recoveries).
# Env: PRESET (default 16gb; datacenter on an 80 GB card; empty: none), PORT (50051), METRICS_PORT (9464),
#      EXTRA_SERVE_ARGS (more `voxgate serve` flags), LEVELS / DURATION (override the mode's),
#      NO_GPU=1 (no nvidia-smi: check the recipe itself on a CPU box; vram.csv stays empty), OUT (results dir).
set -euo pipefail

mode=${1:?usage: $0 quick|sweep|long MODEL_DIR [N] [HOURS]}
model=${2:?model dir (Voxtral-Mini-4B-Realtime checkpoint)}
root=$(cd "$(dirname "$0")/.." && pwd)
vox="$root/.venv/bin/voxgate"
preset=${PRESET-16gb}
port=${PORT:-50051}
metrics_port=${METRICS_PORT:-9464}
out=${OUT:-"$root/bench/results/gpu-$mode-$(date +%Y%m%d-%H%M%S)"}
mkdir -p "$out"
if [ -z "${NO_GPU:-}" ]; then
  command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: this recipe needs an NVIDIA GPU" >&2; exit 2; }
fi

if [ "$mode" = frontends ]; then
  for k in ${FRONTENDS:-1 2 4}; do
    OUT="$out/k$k" LEVELS="${LEVELS:-16,32,64,96,128,160,192,256}" DURATION="${DURATION:-60}" \
      EXTRA_SERVE_ARGS="${EXTRA_SERVE_ARGS:-} --engine-option frontends=$k --workers $k" "$0" quick "$model" \
      > "$out/k$k.out"
  done
  python3 - "$out" ${FRONTENDS:-1 2 4} <<'PY'
import json, sys
out, ks = sys.argv[1], sys.argv[2:]
print(json.dumps({"max_real_time_sessions": {f"frontends={k}": json.load(open(f"{out}/k{k}/bench.json"))
                                              ["max_sessions_held"] for k in ks}}))
PY
  exit 0
fi

case $mode in
  quick) levels=1,4,8,12,16; duration=30 ;;
  sweep) levels=1,2,4,6,8,10,11,12,13,14,16,20,24,32; duration=240 ;;
  long)  n=${3:-8}; hours=${4:-4}; levels=$n; duration=$(python3 -c "print(int($hours * 3600))") ;;
  *) echo "unknown mode $mode (quick, sweep, long)" >&2; exit 2 ;;
esac
levels=${LEVELS:-$levels}
duration=${DURATION:-$duration}
max=$(python3 -c "print(max(map(int, '$levels'.split(','))))")

if [ -z "${NO_GPU:-}" ]; then
  nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv -l 5 > "$out/vram.csv" &
  smi=$!
else
  : > "$out/vram.csv"; smi=
fi
preset_args=()
[ -n "$preset" ] && preset_args=(--preset "$preset")
# shellcheck disable=SC2086
"$vox" serve --engine voxtral --model "$model" "${preset_args[@]}" --max-num-seqs "$max" --max-sessions "$max" \
  --port "$port" --metrics-port "$metrics_port" --idle-timeout-s 600 ${EXTRA_SERVE_ARGS:-} \
  > "$out/serve.out" 2> "$out/serve.log" &
srv=$!
cleanup() {
  [ -n "$smi" ] && kill "$smi" 2>/dev/null
  kill -TERM "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
}
trap cleanup EXIT
echo "waiting for the engine (log: $out/serve.log); the bench waits for readiness ..." >&2
retries=1; [ "$mode" = long ] && retries=0
"$vox" bench --server "127.0.0.1:$port" --server-pid "$srv" --sweep "$levels" --duration "$duration" \
  --frame-ms 80 --stagger-s 0.5 --max-latency-p95-s 1.0 --max-final-s 2.0 --retries "$retries" \
  --ready-timeout-s 900 --out "$out/bench.json"
curl -fsS "http://127.0.0.1:$metrics_port/metrics" > "$out/metrics.txt" 2>/dev/null || true
python3 - "$out" <<'PY'
import csv, json, sys
out = sys.argv[1]
rows = [r for r in csv.reader(open(f"{out}/vram.csv")) if r and r[0] != "timestamp"]
used = [float(r[1].split()[0]) for r in rows]
r = json.load(open(f"{out}/bench.json"))
print(json.dumps({"max_real_time_sessions": r["max_sessions_held"],
                  "vram_mib_first_last_min_max": [used[0], used[-1], min(used), max(used)] if used else None,
                  "levels": [{k: lv[k] for k in ("n", "held", "first_result_p50_s", "final_p99_s",
                                                 "wall_over_audio_max", "errors")} for lv in r["levels"]]},
                 indent=1))
PY
echo "results in $out" >&2
