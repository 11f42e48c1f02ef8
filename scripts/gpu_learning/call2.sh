#!/usr/bin/env bash
# Device call 2 of 4: join the GGUF, check it, install the first wheels (transformers 5.24, peft,
# gguf, regex, typing_extensions), unpack the code, convert the GGUF with ensure_base_model.
set -eu -o pipefail
OUT=${OUT:-/tmp/device-out}; STAGE=${STAGE:-/tmp/stage}; SRC=${SRC:-/tmp/src}; PY=${PY:-python3}
mkdir -p "$OUT"; t0=$(date +%s)
cat "$STAGE/gguf.xz.aa" .gpu/c2/gguf.xz.ab | xz -dc -T0 > "$STAGE/SmolLM2-135M-Instruct.Q4_1.gguf"
(cd "$STAGE" && sha256sum -c "$OLDPWD/.gpu/c2/gguf.sha256") | tee "$OUT/call2.txt"
echo "joined in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/call2.txt"
[ -n "${SKIP_PIP:-}" ] || $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .gpu/c2/whl/*.whl
rm -rf "$SRC" && mkdir -p "$SRC" && tar -xJf .gpu/c2/src.tar.xz -C "$SRC"
echo "installed, unpacked in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/call2.txt"
cd "$SRC" && HF_HUB_OFFLINE=1 PYTHONPATH="$SRC" $PY -c "
import time; from pathlib import Path; from learning.base_model import ensure_base_model
t = time.monotonic(); p = ensure_base_model(Path('$STAGE/rl'), gguf=Path('$STAGE/SmolLM2-135M-Instruct.Q4_1.gguf'))
print('converted', p, round(time.monotonic() - t, 1), 's')
import transformers, peft, torch; print('torch', torch.__version__, '| transformers', transformers.__version__, '| peft', peft.__version__)
" 2>&1 | tee -a "$OUT/call2.txt"
echo "call 2 done in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/call2.txt"
