#!/usr/bin/env bash
# Device call 3 of 4: the other wheels, the environment and the analyzer results, then bench.learning
# base -> SFT -> DPO (stops there; call 4 resumes with RL). LIMIT: seconds the bench may run.
set -u -o pipefail
OUT=${OUT:-/tmp/device-out}; STAGE=${STAGE:-/tmp/stage}; SRC=${SRC:-/tmp/src}; PY=${PY:-python3}
BL=${BL:-/tmp/bl}; BASE=${BASE:-$STAGE/rl/models/smollm2-135m-instruct}
mkdir -p "$OUT" "$BL"; t0=$(date +%s)
[ -n "${SKIP_PIP:-}" ] || $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .gpu/c3/whl/*.whl || exit 1
xz -dc .gpu/c3/env.jsonl.xz > "$BL/env.jsonl" && cp .gpu/c3/static.json.xz "$STAGE/" || exit 1
echo "staged in $(( $(date +%s) - t0 )) s" | tee "$OUT/call3.txt"
$PY -c "import xgrammar, pydantic, libcst, psycopg; from importlib.metadata import version as v; print('xgrammar', v('xgrammar'), '| pydantic', v('pydantic'), '| ruff', v('ruff'), '| libcst', v('libcst'))" 2>&1 | tee -a "$OUT/call3.txt"
cd "$SRC" && HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$SRC" GPU_COMMIT="$(cat COMMIT)" \
  timeout -s INT -k 20 "${LIMIT:-480}" $PY scripts/gpu_learning/bench_gpu.py --static "$STAGE/static.json.xz" \
  --skip-decoding --stop-after-dpo --timings "$OUT/timings3.json" -- --out "$BL" --base-model "$BASE" \
  ${BENCH_ARGS:---steps 30 --seeds 1 --ablations= --threads 8 --device cuda --budget-minutes 30} 2>&1 | tee "$OUT/bench3.log"
echo "bench exit ${PIPESTATUS[0]}; call 3 done in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/call3.txt"
cp "$BL/results.json" "$OUT/results3.json"
