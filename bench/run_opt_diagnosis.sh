#!/usr/bin/env bash
# Why the method ordering is within noise on opt-tiny (bench/results/quality/SUMMARY.md): the same
# calibration (64 C4 windows of 512 tokens, seed 0) at the high ratios 60 and 80 % for plain SVD, the
# covariance family and latentllm, and an ablation of latentllm's joint parts at 60 % (--joint qk, ud,
# none; none = asvd-rootcov with block identity). WikiText-2 and PTB. Writes
# bench/results/quality/opt-tiny-high/ and bench/results/quality/opt-tiny-joint-{qk,ud,none}/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
OUT=bench/results/quality
calib=(--calib c4 --calib-data "$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl" --nsamples 64 --seed 0
       --datasets wikitext2,ptb --data-dir "$SHARED/data")
"$BUILD/latentllm" sweep --force --model "$SHARED/models/opt-tiny" --out "$OUT/opt-tiny-high" \
  --methods plain-svd,asvd-cov,asvd-rootcov,latentllm --ratios 0.6,0.8 "${calib[@]}" 2> "$OUT/opt-tiny-high.log" >/dev/null
for j in qk ud none; do
  "$BUILD/latentllm" sweep --force --model "$SHARED/models/opt-tiny" --out "$OUT/opt-tiny-joint-$j" --methods latentllm \
    --joint "$j" --ratios 0.6 "${calib[@]}" 2> "$OUT/opt-tiny-joint-$j.log" >/dev/null
done
