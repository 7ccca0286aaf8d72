#!/usr/bin/env bash
# Low rank against sparse at equal bytes (the paper's appendix "Sparse Matrix"): TinyStories-656K compressed
# with 64 C4 calibration windows of 256 tokens (seed 0) so that its compressed modules (the linear modules of
# attention and MLP) take 20, 30, 40 and 50 % fewer bytes in F16: latentllm at --ratio B (its factors are
# 16-bit values), sparse (hard, fista), wanda and sparsegpt at the sparsity whose values + bitmask storage
# takes as many bytes, S ≥ B + 1/16 (a d'·d-bit mask costs 1/16 of the 16-bit dense bytes). Perplexity on the
# held-out TinyStories test stories (117-232, `ppl --dataset tinystories-test`); the bytes each row achieves
# (`compress --json`: sparse.storage_bytes, or 2 bytes per factored parameter) and the mean relative
# layer-wise loss of its modules (ModuleReport::loss_rel). lowrank-sparse (B·A + D) runs at the same --ratio S
# as the sparse methods: its modules take the bytes of pure sparse at S, split between the factors and D per
# module. Writes bench/results/sparse_equal_bytes.csv; with METHODS (e.g. METHODS=lowrank-sparse) only the rows
# of those methods, printed, the CSV left as it is. MODEL=stories260K or MODEL=opt-tiny runs the same table
# on that fixture (opt-tiny's perplexity on the first 100 windows of 512 tokens of the WikiText-2 test split) into
# bench/results/sparse_equal_bytes_<model>.csv; MODEL=llava-shapes-tiny compresses its language model on 64
# ScienceQA-shapes train problems with their images and reports ScienceQA val accuracy (LLaVA's protocol; the
# data has no test split) in place of perplexity.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/latentllm
SHARED=${LATENTLLM_SHARED:-../shared}
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
ST=$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt
NAME=${MODEL:-TinyStories-656K}
EVAL=(--dataset tinystories-test --data "$ST")
CALIB=(--calib c4 --calib-data "$C4" --nsamples 64 --seqlen 256 --seed 0)
CSV=bench/results/sparse_equal_bytes.csv
QUALITY=ppl
case $NAME in
  TinyStories-656K) MODEL=$SHARED/models/TinyStories-656K ;;
  stories260K) MODEL=$SHARED/models/stories260K/hf; CSV=bench/results/sparse_equal_bytes_$NAME.csv ;;
  opt-tiny) MODEL=$SHARED/models/opt-tiny; CSV=bench/results/sparse_equal_bytes_$NAME.csv
    EVAL=(--dataset wikitext2 --data "$SHARED/data/wikitext2/wiki.test.raw" --max-windows 100) ;;
  llava-shapes-tiny) MODEL=$SHARED/models/llava-shapes-tiny; CSV=bench/results/sparse_equal_bytes_$NAME.csv
    QUALITY=scienceqa_val_acc
    CALIB=(--calib scienceqa --calib-data "$SHARED/data/scienceqa-shapes" --nsamples 64 --seed 0) ;;
  *) echo "MODEL: TinyStories-656K, stories260K, opt-tiny or llava-shapes-tiny (got $NAME)" >&2; exit 2 ;;
esac
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

METHODS=${METHODS:-}
FISTA=${FISTA:-1}  # FISTA=0 leaves out the sparse (fista) rows (its λ search is the slowest solver by far)
[[ -z $METHODS ]] || CSV=/dev/null
quality() {  # model-dir: test perplexity, or ScienceQA val accuracy (%)
  if [[ $QUALITY == ppl ]]; then
    "$BIN" ppl --model "$1" "${EVAL[@]}" 2>/dev/null | awk '$1 == "ppl" { print $2 }'
  else
    "$BIN" eval --task scienceqa --model "$1" --data "$SHARED/data/scienceqa-shapes" --split val --json 2>/dev/null |
      python3 -c 'import json, sys; print("%.1f" % json.load(sys.stdin)["accuracy_percent"]["AVG"])'
  fi
}
row() {  # bytes_target label args...
  local target=$1 label=$2
  shift 2
  if [[ -n $METHODS && " $METHODS " != *" ${label%% *} "* ]]; then return; fi
  "$BIN" compress --model "$MODEL" --out "$TMP/out" --force "${CALIB[@]}" --json "$@" > "$TMP/json" 2> "$TMP/log"
  local ppl stats
  ppl=$(quality "$TMP/out")
  stats=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
dense = j["dense_params"]
stored = j["sparse"]["storage_bytes"] if "sparse" in j else 2 * j["params"]
rel = [m["loss_rel"] for m in j["modules"]]
print("%.4f,%.5f" % (1 - stored / (2 * dense), sum(rel) / len(rel)))' "$TMP/json")
  echo "$target,$label,$stats,$ppl"
}

dense=0
[[ -n $METHODS ]] || dense=$(quality "$MODEL")
{
  echo "bytes_target,method,bytes_saved,mean_loss_rel,$QUALITY"
  echo "0,dense,0,0,$dense"
  for b in 0.2 0.3 0.4 0.5; do
    # Each row prunes ⌊S·d⌋ of its d inputs (d = 128 or 384 here): S rounded up to whole 128ths so that the
    # bytes saved reach the target.
    s=$(python3 -c "import math; print(round(math.ceil(($b + 1 / 16) * 128) / 128 + 1e-6, 6))")
    row "$b" "latentllm $b" --method latentllm --ratio "$b"
    row "$b" "sparse hard $s" --method sparse --solver hard --ratio "$s"
    [[ $FISTA == 0 ]] || row "$b" "sparse fista $s" --method sparse --solver fista --ratio "$s"
    row "$b" "wanda $s" --method wanda --ratio "$s"
    row "$b" "sparsegpt $s" --method sparsegpt --ratio "$s"
    row "$b" "lowrank-sparse $s" --method lowrank-sparse --ratio "$s"
  done
} | tee "$CSV"
