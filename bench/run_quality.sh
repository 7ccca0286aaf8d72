#!/usr/bin/env bash
# Quality bar of issues 3 and 4: `latentllm sweep` of every method (the six pre-conditioners of the
# paper's Table 1 and latentllm) at ratios 10-40 % on opt-tiny (WikiText-2, PTB), stories260K and
# TinyStories-656K (WikiText-2), 64 calibration windows of C4 (seqlen = the model's maximum, <= 2048),
# seed 0, as the paper. Writes bench/results/quality/<model>/{table2.md,table3.md,results.*,ppl_*.png}
# (bench/results/quality/SUMMARY.md reads them, with the in-domain and opt-tiny diagnosis runs).
#   bench/run_quality.sh [model ...]      (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
cmake --build "$BUILD" --target latentllm-cli >/dev/null
OUT=bench/results/quality
mkdir -p "$OUT"
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(stories260K TinyStories-656K opt-tiny)
for m in "${models[@]}"; do
  case $m in
    opt-tiny) dir=$SHARED/models/opt-tiny; datasets=wikitext2,ptb ;;
    stories260K) dir=$SHARED/models/stories260K/hf; datasets=wikitext2 ;;
    TinyStories-656K) dir=$SHARED/models/TinyStories-656K; datasets=wikitext2 ;;
    *) echo "unknown model $m" >&2; exit 2 ;;
  esac
  echo "== $m (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  "$BUILD/latentllm" sweep --force --model "$dir" --out "$OUT/$m" --ratios 0.1,0.2,0.3,0.4 \
    --calib c4 --calib-data "$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl" --nsamples 64 --seed 0 \
    --datasets "$datasets" --data-dir "$SHARED/data" 2> "$OUT/$m.log"
done
