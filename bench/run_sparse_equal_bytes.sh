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
# of those methods, printed, the CSV left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/latentllm
SHARED=${LATENTLLM_SHARED:-../shared}
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
ST=$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt
MODEL=$SHARED/models/TinyStories-656K
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

METHODS=${METHODS:-}
CSV=bench/results/sparse_equal_bytes.csv
[[ -z $METHODS ]] || CSV=/dev/null
row() {  # bytes_target label args...
  local target=$1 label=$2
  shift 2
  if [[ -n $METHODS && " $METHODS " != *" ${label%% *} "* ]]; then return; fi
  "$BIN" compress --model "$MODEL" --out "$TMP/out" --force --calib c4 --calib-data "$C4" --nsamples 64 \
    --seqlen 256 --seed 0 --json "$@" > "$TMP/json" 2> "$TMP/log"
  local ppl stats
  ppl=$("$BIN" ppl --model "$TMP/out" --dataset tinystories-test --data "$ST" 2>/dev/null | awk '$1 == "ppl" { print $2 }')
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
[[ -n $METHODS ]] || dense=$("$BIN" ppl --model "$MODEL" --dataset tinystories-test --data "$ST" 2>/dev/null | awk '$1 == "ppl" { print $2 }')
{
  echo "bytes_target,method,bytes_saved,mean_loss_rel,ppl"
  echo "0,dense,0,0,$dense"
  for b in 0.2 0.3 0.4 0.5; do
    # Each row prunes ⌊S·d⌋ of its d inputs (d = 128 or 384 here): S rounded up to whole 128ths so that the
    # bytes saved reach the target.
    s=$(python3 -c "import math; print(round(math.ceil(($b + 1 / 16) * 128) / 128 + 1e-6, 6))")
    row "$b" "latentllm $b" --method latentllm --ratio "$b"
    row "$b" "sparse hard $s" --method sparse --solver hard --ratio "$s"
    row "$b" "sparse fista $s" --method sparse --solver fista --ratio "$s"
    row "$b" "wanda $s" --method wanda --ratio "$s"
    row "$b" "sparsegpt $s" --method sparsegpt --ratio "$s"
    row "$b" "lowrank-sparse $s" --method lowrank-sparse --ratio "$s"
  done
} | tee "$CSV"
