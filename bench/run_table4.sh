#!/usr/bin/env bash
# The paper's Table 4 on llava-shapes-tiny: each method compresses the LLaVA language model at 10-50 %
# with the paper's multimodal calibration (64 ScienceQA train problems with their images,
# --calib scienceqa), then `eval --task scienceqa` scores the val split (the split defaults are chosen on;
# the test split is held back). Writes bench/results/lmm/table4_val.md.
# Usage: bench/run_table4.sh [BIN] [PROTOCOL]   (BIN: build/latentllm; PROTOCOL: generate, the paper's, or loglik)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/latentllm}
PROTOCOL=${2:-generate}
SHARED=${LATENTLLM_SHARED:-../shared}
MODEL=$SHARED/models/llava-shapes-tiny
DATA=$SHARED/data/scienceqa-shapes
OUT=bench/results/lmm/table4_val.md
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

row() {  # label, then the eval's "accuracy (%)" row as a Markdown row
  local label=$1 model=$2
  "$BIN" eval --task scienceqa --model "$model" --data "$DATA" --split val --protocol "$PROTOCOL" -q 2>/dev/null |
    awk -v l="$label" '$1 == "accuracy" { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l, $3, $4, $5, $6, $7, $8, $9, $10, $11 }'
}

{
  echo "# Table 4 on llava-shapes-tiny (ScienceQA-shapes val, protocol $PROTOCOL)"
  echo
  echo "Calibration: 64 ScienceQA-shapes train problems with their images (\`--calib scienceqa\`, seed 0); the language"
  echo "model compressed (the paper's setting), the vision tower and projector dense. Accuracy in percent."
  echo "Made by \`bench/run_table4.sh\` ($(date -u +%Y-%m-%d), $("$BIN" --version))."
  echo
  echo "| method | NAT | SOC | LAN | TXT | IMG | NO | G1-6 | G7-12 | Avg |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  row "dense" "$MODEL"
  for ratio in 0.1 0.2 0.3 0.4 0.5; do
    for spec in "plain-svd:--method plain-svd" "asvd-l2:--method asvd-l2" "asvd-rootcov:--method asvd-rootcov" \
                "latentllm (paper):--method latentllm --preset paper" "latentllm (default):--method latentllm"; do
      label=${spec%%:*}
      # shellcheck disable=SC2086
      "$BIN" compress --model "$MODEL" --out "$TMP/m" --force --ratio "$ratio" ${spec#*:} --calib scienceqa \
        --calib-data "$DATA" --dtype f32 -q > /dev/null 2>&1
      row "$label $(awk -v r="$ratio" 'BEGIN { printf "%d %%", r * 100 }')" "$TMP/m"
    done
  done
} > "$OUT"
cat "$OUT"
