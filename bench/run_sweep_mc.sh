#!/usr/bin/env bash
# The zero-shot next-sentence task in the sweep tables beside perplexity (sweep --mc): each TinyStories
# model compressed on 16 C4 windows of 128 tokens (so that no evaluation story is seen), the next-sentence
# task built from the held-out test stories (117-232: this script cuts them out of the 232-story file at
# run time, after the 116th <|endoftext|> line) and perplexity on the same test stories.
# Writes bench/results/quality/sweep_mc_<model>/ (table2.md, mc.csv, results.json; the plots are left out).
# Usage: bench/run_sweep_mc.sh [BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/latentllm}
SHARED=${LATENTLLM_SHARED:-../shared}
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
awk 'n >= 116 { print } /^<\|endoftext\|>$/ { n++ }' "$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.txt" \
  > "$TMP/test-stories.txt"
[ "$(grep -c '^<|endoftext|>$' "$TMP/test-stories.txt")" = 116 ] || { echo "expected 116 test stories" >&2; exit 1; }
for m in stories260K:$SHARED/models/stories260K/hf TinyStories-656K:$SHARED/models/TinyStories-656K; do
  name=${m%%:*}; dir=${m#*:}
  out=bench/results/quality/sweep_mc_$name
  "$BIN" sweep --model "$dir" --methods latentllm,asvd-rootcov,plain-svd --ratios 0.2,0.4 \
    --calib c4 --calib-data "$C4" --nsamples 16 --seqlen 128 --datasets tinystories-test --data-dir "$SHARED/data" \
    --mc "tinystories-next=$TMP/test-stories.txt" --out "$TMP/$name" --force -q > "$TMP/$name.out" 2> "$TMP/$name.log" || {
    tail -5 "$TMP/$name.log" >&2; exit 1; }
  mkdir -p "$out"
  cp "$TMP/$name"/{table2.md,mc.csv,results.csv,results.json} "$out/"
  cat "$out/table2.md"
done
