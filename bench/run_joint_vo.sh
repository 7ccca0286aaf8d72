#!/usr/bin/env bash
# Joint V-O (issue 4, item 2): latentllm with --joint qk,vo,ud (attention-aware joint V-O) against the
# default --joint qk,ud (V and O local root-covariance), 20 % (and 40 % on stories260K), 64 C4 calibration windows, on
# opt-tiny (WikiText-2, PTB) and stories260K (WikiText-2 and its own domain, the TinyStories validation stories).
# The default's figures are in bench/results/quality/<model>{,-indomain}/; this writes bench/results/joint_vo/<model>/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
OUT=bench/results/joint_vo
mkdir -p "$OUT"
for m in stories260K opt-tiny; do
  case $m in
    opt-tiny) dir=$SHARED/models/opt-tiny; datasets=wikitext2,ptb; ratios=0.2 ;;
    stories260K) dir=$SHARED/models/stories260K/hf; ratios=0.2,0.4
      datasets=wikitext2,text=$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt ;;
  esac
  "$BUILD/latentllm" sweep --force --model "$dir" --out "$OUT/$m" --methods latentllm --joint qk,vo,ud --ratios "$ratios" \
    --calib c4 --calib-data "$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl" --nsamples 64 \
    --datasets "$datasets" --data-dir "$SHARED/data" 2> "$OUT/$m.log" >/dev/null
done
