#!/usr/bin/env bash
# Device call 1 of 4: keep the first part of the compressed GGUF on the (warm) machine; what it has.
set -u
OUT=${OUT:-/tmp/device-out}; STAGE=${STAGE:-/tmp/stage}
mkdir -p "$STAGE" "$OUT"
cp .gpu/c1/gguf.xz.aa "$STAGE"/ && ls -l "$STAGE" | tee "$OUT/call1.txt"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2
  df -h /tmp | tail -1; command -v python3; python3 -V
  python3 -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|peft|tokenizers|huggingface.hub|safetensors|numpy|matplotlib|xgrammar|pydantic|ruff|libcst) '
} 2>&1 | tee -a "$OUT/call1.txt"
