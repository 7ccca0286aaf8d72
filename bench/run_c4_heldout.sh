#!/usr/bin/env bash
# Issue 13: the default against the paper preset on a C4-calibrated model outside the TinyStories
# domain (opt-tiny), with C4 text held out of the calibration as validation (c4-heldout: the last 100
# documents of the shared C4 file, left out by --calib-holdout 100) beside the test sets (WikiText-2
# test, PTB valid), at equal parameter budgets. Nothing was chosen on any of these: the defaults come
# from the TinyStories validation half (docs/PRESETS.md); this checks that they carry over.
#   bench/results/paper/opt-tiny-c4heldout-{paper,default}/   the two sweeps (latentllm, 10-40 %)
#   bench/results/paper/C4_HELDOUT.md                         validation and test side by side
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
RES=bench/results/paper
mkdir -p "$RES"
for preset in paper default; do
  out=$RES/opt-tiny-c4heldout-$preset
  "$BUILD/latentllm" sweep --force --model "$SHARED/models/opt-tiny" --out "$out" --methods latentllm \
    --ratios 0.1,0.2,0.3,0.4 --preset "$preset" --calib c4 --calib-data "$C4" --calib-holdout 100 --nsamples 64 \
    --seed 0 --datasets c4-heldout,wikitext2,ptb --data-dir "$SHARED/data" 2> "$out.log" >/dev/null
done
# shellcheck source=bench/sweep_results.sh
. bench/sweep_results.sh  # the working directory is the checkout's root (cd above)
{
  echo "# opt-tiny: --preset default against --preset paper, C4 held out as validation (issue 13)"
  echo
  echo "latentllm at equal parameter budgets; calibration 64 random C4 windows of 512 tokens, seed 0, from the"
  echo "first 900 documents of the shared C4 file (\`--calib-holdout 100\`); validation: the last 100 documents"
  echo "(\`c4-heldout\`); test: WikiText-2 test and PTB valid. The defaults were chosen on TinyStories validation"
  echo "text only, never on these. Dense: $(ppl_of "$RES/opt-tiny-c4heldout-paper/results.json" dense 0 c4-heldout 2>/dev/null || echo -)"
  echo "(c4-heldout), $(ppl_of "$RES/opt-tiny-c4heldout-paper/results.json" dense 0 wikitext2 2>/dev/null || echo -) (WikiText-2),"
  echo "$(ppl_of "$RES/opt-tiny-c4heldout-paper/results.json" dense 0 ptb 2>/dev/null || echo -) (PTB)."
  echo
  echo "| ratio | c4-heldout paper | default | change | WikiText-2 paper | default | change | PTB paper | default | change |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for r in 0.1 0.2 0.3 0.4; do
    printf '| %s %% |' "$(awk -v r=$r 'BEGIN { print 100 * r }')"
    for d in c4-heldout wikitext2 ptb; do
      p=$(ppl_of "$RES/opt-tiny-c4heldout-paper/results.json" latentllm "$r" "$d")
      q=$(ppl_of "$RES/opt-tiny-c4heldout-default/results.json" latentllm "$r" "$d")
      printf ' %s | %s | %s |' "$p" "$q" "$(awk -v a="$q" -v b="$p" 'BEGIN { printf "%+.1f%%", 100 * (a / b - 1) }')"
    done
    echo
  done
} > "$RES/C4_HELDOUT.md"
cat "$RES/C4_HELDOUT.md"
