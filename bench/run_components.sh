#!/usr/bin/env bash
# compress --components on llava-shapes-tiny: the language model alone against the language model, vision
# tower and projector together (global ranks across the parts, the default preset's, and uniform), at
# 20-40 % with the paper's multimodal calibration (64 ScienceQA train problems, --calib scienceqa), scored
# by `eval --task scienceqa` on val (the split defaults are chosen on; test is held back).
# Writes bench/results/lmm/components_val.md.
# Usage: bench/run_components.sh [BIN] [PROTOCOL]   (BIN: build/latentllm; PROTOCOL: generate or loglik)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/latentllm}
PROTOCOL=${2:-generate}
SHARED=${LATENTLLM_SHARED:-../shared}
MODEL=$SHARED/models/llava-shapes-tiny
DATA=$SHARED/data/scienceqa-shapes
OUT=bench/results/lmm/components_val.md
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

{
  echo "# compress --components on llava-shapes-tiny (ScienceQA-shapes val, protocol $PROTOCOL)"
  echo
  echo "Calibration: 64 ScienceQA-shapes train problems with their images (\`--calib scienceqa\`, seed 0), the default"
  echo "preset (latentllm). \`--ratio\` is the share of the compressed parts' weights removed. Accuracy in percent;"
  echo "dense 84.20. Made by \`bench/run_components.sh\` ($(date -u +%Y-%m-%d), $("$BIN" --version))."
  echo
  echo "| ratio | parts | ranks | compressed weights | NAT | SOC | LAN | TXT | IMG | NO | G1-6 | G7-12 | Avg |"
  echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for r in 0.2 0.3 0.4; do
    for cfg in "lm global" "lm,vision,projector global" "lm,vision,projector uniform" "lm,vision global"; do
      parts=${cfg% *} alloc=${cfg#* }
      out=$TMP/$parts-$alloc-$r
      "$BIN" compress --model "$MODEL" --out "$out" --ratio "$r" --calib scienceqa --calib-data "$DATA" \
        --components "$parts" --rank-alloc "$alloc" -q > "$TMP/log" 2>&1
      weights=$(sed -n 's/.*: \([0-9]* -> [0-9]*\) weights in compressed modules/\1/p' "$TMP/log")
      "$BIN" eval --task scienceqa --model "$out" --data "$DATA" --split val --protocol "$PROTOCOL" -q 2>/dev/null |
        awk -v r="$r" -v p="$parts" -v a="$alloc" -v w="$weights" '$1 == "accuracy" {
          printf "| %d %% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r * 100, p, a, w,
                 $3, $4, $5, $6, $7, $8, $9, $10, $11 }'
      rm -rf "$out"
    done
  done
} > "$OUT"
cat "$OUT"
