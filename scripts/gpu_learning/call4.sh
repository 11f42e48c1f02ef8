#!/usr/bin/env bash
# Device call 4 of 4: bench.learning --resume (RL seed 0 from the DPO adapter, its held-out evaluation).
set -u -o pipefail
OUT=${OUT:-/tmp/device-out}; STAGE=${STAGE:-/tmp/stage}; SRC=${SRC:-/tmp/src}; PY=${PY:-python3}
BL=${BL:-/tmp/bl}; BASE=${BASE:-$STAGE/rl/models/smollm2-135m-instruct}
mkdir -p "$OUT"; t0=$(date +%s)
cd "$SRC" && HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$SRC" GPU_COMMIT="$(cat COMMIT)" \
  timeout -s INT -k 20 "${LIMIT:-540}" $PY scripts/gpu_learning/bench_gpu.py --static "$STAGE/static.json.xz" \
  --skip-decoding --timings "$OUT/timings4.json" -- --out "$BL" --base-model "$BASE" --resume \
  ${BENCH_ARGS:---steps 30 --seeds 1 --ablations= --threads 8 --device cuda --budget-minutes 30} 2>&1 | tee "$OUT/bench4.log"
echo "bench exit ${PIPESTATUS[0]}; call 4 done in $(( $(date +%s) - t0 )) s" | tee "$OUT/call4.txt"
cp "$BL/results.json" "$OUT/results.json"
