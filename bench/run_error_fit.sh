#!/usr/bin/env bash
# Error-compensating fits (--fit compensate) against the local fit, on the TinyStories VALIDATION split
# only (stories 1-116, --dataset tinystories-valid; never the test split): latentllm on stories260K and
# TinyStories-656K, default joint parts (qk,ud) and --joint none, with and without --no-intra-layer,
# ratios 0.1-0.4, uniform ranks (as when it was measured), default calibration (c4, 64 random windows).
# One line per run:
#   fixture joint intra ratio fit ppl
# Usage: bench/run_error_fit.sh [BIN] > results.txt     (results: bench/results/error_fit.md)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/latentllm}")
SHARED=$(realpath "${LATENTLLM_SHARED:-../shared}")
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
STORIES=$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for fx in stories260K:$SHARED/models/stories260K/hf 656K:$SHARED/models/TinyStories-656K; do
  name=${fx%%:*}; model=${fx#*:}
  for joint in default none; do
    for intra in intra nointra; do
      for r in 0.1 0.2 0.3 0.4; do
        for fit in local compensate; do
          args=(--model "$model" --out "$TMP/out" --force --method latentllm --ratio "$r" --calib c4 --calib-data "$C4"
                --fit "$fit" --rank-alloc uniform)
          [ "$joint" = none ] && args+=(--joint none)
          [ "$intra" = nointra ] && args+=(--no-intra-layer)
          "$BIN" compress "${args[@]}" > /dev/null 2>&1
          ppl=$("$BIN" ppl --model "$TMP/out" --dataset tinystories-valid --data "$STORIES" 2>/dev/null | awk '$1 == "ppl" { print $2 }')
          echo "$name $joint $intra $r $fit $ppl"
        done
      done
    done
  done
done
