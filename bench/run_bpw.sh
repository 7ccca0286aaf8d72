#!/usr/bin/env bash
# One budget in bytes (compress --bpw) against dense GPTQ and single (ratio, bits) pairs at the same bytes:
# each TinyStories model compressed on 64 C4 windows of 256 tokens (seed 0), perplexity on the validation
# stories (1-116) and the test stories (117-232). bits per weight = compress --json's
# compressed_modules.bits_per_weight (codes, scales, zero points and biases of the compressed modules).
# Writes bench/results/quant/bpw.md and bpw.csv. Usage: bench/run_bpw.sh [BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/latentllm}
SHARED=${LATENTLLM_SHARED:-../shared}
STORIES=$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
CSV=bench/results/quant/bpw.csv
echo "model,configuration,bits_per_weight,ppl_valid,ppl_test" > "$CSV"
run() {  # model-name model-dir label compress-args...
  local name=$1 dir=$2 label=$3; shift 3
  "$BIN" compress --model "$dir" --calib c4 --calib-data "$C4" --nsamples 64 --seqlen 256 --out "$TMP/out" --force \
    --json "$@" > "$TMP/c.json" 2> "$TMP/err.txt" || { echo "$name $label: compress failed" >&2; tail -3 "$TMP/err.txt" >&2; return; }
  local bpw v t
  bpw=$(python3 -c "import json,sys; print('%.4f' % json.load(open(sys.argv[1]))['compressed_modules']['bits_per_weight'])" "$TMP/c.json")
  v=$("$BIN" ppl --model "$TMP/out" --data "$STORIES" --dataset tinystories-valid --seqlen 512 --json 2>/dev/null | python3 -c "import json,sys; print('%.4f' % json.load(sys.stdin)['ppl'])")
  t=$("$BIN" ppl --model "$TMP/out" --data "$STORIES" --dataset tinystories-test --seqlen 512 --json 2>/dev/null | python3 -c "import json,sys; print('%.4f' % json.load(sys.stdin)['ppl'])")
  echo "$name,$label,$bpw,$v,$t" | tee -a "$CSV"
}
for m in stories260K:$SHARED/models/stories260K/hf TinyStories-656K:$SHARED/models/TinyStories-656K; do
  name=${m%%:*}; dir=${m#*:}
  run "$name" "$dir" "gptq 2-bit g64" --method gptq --bits 2 --group 64
  run "$name" "$dir" "gptq 2-bit g32" --method gptq --bits 2 --group 32
  run "$name" "$dir" "gptq 3-bit g64" --method gptq --bits 3 --group 64
  run "$name" "$dir" "gptq 3-bit g32" --method gptq --bits 3 --group 32
  for b in 2.5 3.0 3.5 4.0; do run "$name" "$dir" "latentllm --bpw $b g32" --bpw $b --group 32; done
  for b in 2.5 3.0; do run "$name" "$dir" "latentllm --bpw $b g64" --bpw $b --group 64; done
  run "$name" "$dir" "latentllm 0.2 2-bit g32" --ratio 0.2 --bits 2 --group 32
  run "$name" "$dir" "latentllm 0.4 3-bit g32" --ratio 0.4 --bits 3 --group 32
  run "$name" "$dir" "latentllm 0.2 3-bit g32" --ratio 0.2 --bits 3 --group 32
done
