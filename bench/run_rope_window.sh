#!/usr/bin/env bash
# RoPE-aware joint Q-K (issue 4, item 1): latentllm on the RoPE models (stories260K, TinyStories-656K)
# with --rope-window 0 (plain joint Q-K, exact only on the diagonal) and 8, at ratios 20 % and 40 %,
# 64 C4 calibration windows. Perplexity on WikiText-2 and on the TinyStories validation stories (the
# models' own domain). Writes bench/results/rope_window/<model>-w<w>/ and bench/results/rope_window/SUMMARY.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
OUT=bench/results/rope_window
mkdir -p "$OUT"
STORIES=$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt
summary="# RoPE-aware joint Q-K: perplexity by window w\n\n| model | w | ratio | wikitext2 | tinystories |\n|---|---:|---:|---:|---:|\n"
for m in stories260K TinyStories-656K; do
  case $m in
    stories260K) dir=$SHARED/models/stories260K/hf ;;
    TinyStories-656K) dir=$SHARED/models/TinyStories-656K ;;
  esac
  for w in 0 8; do
    "$BUILD/latentllm" sweep --force --model "$dir" --out "$OUT/$m-w$w" --methods latentllm --ratios 0.2,0.4 \
      --rope-window "$w" --calib c4 --calib-data "$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl" \
      --nsamples 64 --datasets "wikitext2,text=$STORIES" --data-dir "$SHARED/data" 2> "$OUT/$m-w$w.log" >/dev/null
    summary+=$(awk -F, -v m="$m" -v w="$w" 'NR > 1 && $1 == "latentllm" { p[$2 "," $3] = $4 }
      END { for (r in p) { split(r, k, ","); if (k[2] == "wikitext2") printf "| %s | %s | %s | %.2f | %.2f |\n", m, w, k[1], p[r], p[k[1] ",text"] } }' \
      "$OUT/$m-w$w/results.csv" | sort)
    summary+=$'\n'
  done
done
printf "%b" "$summary" > "$OUT/SUMMARY.md"
cat "$OUT/SUMMARY.md"
