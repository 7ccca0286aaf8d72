#!/usr/bin/env bash
# Quality per byte of quantized latent models against the quantization baselines (docs/QUANT.md): the
# TinyStories models compressed with 64 C4 calibration windows of 256 tokens (seed 0), perplexity on the
# held-out TinyStories test stories (117-232), and the bits per original weight of the compressed
# modules (inspect --json: codes, scales, zero points included). Writes bench/results/quant/<model>.csv
# and prints a markdown table per model.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/latentllm
SHARED=${LATENTLLM_SHARED:-../shared}
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
ST=$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
G=${GROUP:-32}

row() {  # model_dir label args...
  local dir=$1 label=$2
  shift 2
  "$BIN" compress --model "$dir" --out "$TMP/out" --force --calib c4 --calib-data "$C4" --nsamples 64 --seqlen 256 \
    --seed 0 "$@" > /dev/null 2> "$TMP/log"
  local ppl bpw
  ppl=$("$BIN" ppl --model "$TMP/out" --dataset tinystories-test --data "$ST" 2>/dev/null | awk '$1 == "ppl" { print $2 }')
  bpw=$("$BIN" inspect --model "$TMP/out" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
q = j.get("compressed_modules")
if q: print("%.3f" % q["bits_per_weight"])
else:
    d = {"float32": 32, "float16": 16, "bfloat16": 16}[j["torch_dtype"]]
    dense = sum(e["in"] * e["out"] for e in j["latent_modules"])
    print("%.3f" % (d * sum(e["params"] for e in j["latent_modules"]) / dense))')
  echo "$label,$*,$bpw,$ppl"
}

for model in stories260K TinyStories-656K; do
  case $model in
    stories260K) dir=$SHARED/models/stories260K/hf ;;
    TinyStories-656K) dir=$SHARED/models/TinyStories-656K ;;
  esac
  dense=$("$BIN" ppl --model "$dir" --dataset tinystories-test --data "$ST" 2>/dev/null | awk '$1 == "ppl" { print $2 }')
  {
    echo "config,args,bits_per_weight,ppl"
    echo "dense f16,,16.000,$dense"
    for r in 0.1 0.2; do
      row "$dir" "latentllm $r 16-bit" --method latentllm --ratio $r
      row "$dir" "latentllm $r 8-bit rtn" --method latentllm --ratio $r --bits 8 --group $G --quantizer rtn
      row "$dir" "latentllm $r 8-bit gptq" --method latentllm --ratio $r --bits 8 --group $G --quantizer gptq
      row "$dir" "latentllm $r 4-bit gptq" --method latentllm --ratio $r --bits 4 --group $G --quantizer gptq
      row "$dir" "latentllm $r 3-bit gptq" --method latentllm --ratio $r --bits 3 --group $G --quantizer gptq
    done
    row "$dir" "latentllm 0.1 4-bit rtn" --method latentllm --ratio 0.1 --bits 4 --group $G --quantizer rtn
    for b in 8 4 3 2; do
      row "$dir" "gptq $b-bit" --method gptq --bits $b --group $G
      row "$dir" "rtn $b-bit" --method rtn --bits $b --group $G
    done
  } > "bench/results/quant/$model.csv"
  echo "## $model (dense test perplexity $dense)"
  echo
  echo "| configuration | bits per weight | perplexity |"
  echo "|---|---:|---:|"
  tail -n +2 "bench/results/quant/$model.csv" | awk -F, '{ printf "| %s | %s | %s |\n", $1, $3, $4 }'
  echo
done
