#!/usr/bin/env bash
# Why the method ordering is noisy on WikiText-2 for the TinyStories models (bench/results/quality):
# WikiText-2 is far outside their training domain (dense perplexity 122 and 709). The same sweep (every
# method, ratios 10-40 %, the same 64 C4 calibration windows, seed 0) evaluated on the models' own domain,
# the TinyStories validation stories. Writes bench/results/quality/<model>-indomain/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
STORIES=$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt
for m in stories260K TinyStories-656K; do
  case $m in
    stories260K) dir=$SHARED/models/stories260K/hf ;;
    TinyStories-656K) dir=$SHARED/models/TinyStories-656K ;;
  esac
  "$BUILD/latentllm" sweep --force --model "$dir" --out "bench/results/quality/$m-indomain" \
    --ratios 0.1,0.2,0.3,0.4 \
    --calib c4 --calib-data "$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl" --nsamples 64 \
    --datasets "text=$STORIES" --data-dir "$SHARED/data" 2> "bench/results/quality/$m-indomain.log" >/dev/null
done
