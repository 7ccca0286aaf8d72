#!/usr/bin/env bash
# Decode with the weights as stored (F16/BF16) vs float32 (generate --weights), results in
# bench/results/decode/stored-dtype*.{json,md}:
#   bench/run_stored_dtype.sh opt-1.3b          the OPT-1.3B shape (F16): bench/stored_dtype alternating
#                                               f32 and stored, median of 3, roofline and sgemm peak
#   bench/run_stored_dtype.sh llama-3-8b[:K]    the Llama-3-8B shape (BF16, K layers; default all 32):
#                                               `generate` 32 tokens (weights copied into huge pages), then
#                                               bench/stored_dtype with stored-mapped and stored (float32 would need
#                                               32 GB), peak RSS by /usr/bin/time, the roofline from
#                                               bench/stored_dtype in the same script
#   LATENT=DIR bench/run_stored_dtype.sh latent  a latent checkpoint (compress --dtype bf16) likewise
#   bench/run_stored_dtype.sh llama-3-8b-latent[:R]  its latent R (default 0.4; BF16, all 32 layers) with
#                                               random factors at latentllm's planned ranks
#                                               (bench/onnx_latent, streamed one layer at a time), likewise
# Checkpoints with RANDOM weights (latentllm-synth) go under $SYNTH (default /tmp): 16 GB for the whole
# Llama-3-8B shape, deleted afterwards (KEEP=1 keeps them). RUNS (default 3) runs of each measurement.
# Run on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
SYNTH=${SYNTH:-/tmp}
OUT=bench/results/decode
mkdir -p "$OUT"
synth() {  # preset layers dtype dir
  [ -f "$4/config.json" ] || "$BUILD/tools/synth/latentllm-synth" --preset "$1" --layers "$2" --dtype "$3" --out "$4" \
    --tokenizers "$SHARED/data/tokenizers" >&2
}
RUNS=${RUNS:-3}
generate_runs() {  # dir name: RUNS × generate 32 tokens with its peak RSS, stored weights
  local dir=$1 name=$2
  for r in $(seq "$RUNS"); do
    /usr/bin/time -f "peak_rss_kb %M" "$BUILD/latentllm" generate --model "$dir" --prompt "The capital of France is" \
      --max-new-tokens 32 --temperature 0 --json --weights stored 2> "$OUT/.gen.err" > "$OUT/.gen.json"
    echo "run $r: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("decode_tokens_per_s", round(d["decode_tokens_per_s"],3), "prompt_tokens_per_s", round(d["prompt_tokens_per_s"],2))' "$OUT/.gen.json") $(grep peak_rss_kb "$OUT/.gen.err") load $(cut -d' ' -f1 /proc/loadavg)"
  done
  rm -f "$OUT/.gen.err" "$OUT/.gen.json"
}
for spec in "$@"; do
  echo "load average before $spec: $(cut -d' ' -f1-3 /proc/loadavg); free: $(free -g | awk '/Mem:/ {print $7}') GiB available" >&2
  case $spec in
    opt-1.3b)
      dir=$SYNTH/synth-opt-1.3b
      synth opt-1.3b 0 f16 "$dir"
      "$BUILD/bench/stored_dtype" --model "$dir" --name opt-1.3b --runs "$RUNS" --tokens 32
      [ "${KEEP:-0}" = 1 ] || rm -rf "$dir"
      ;;
    llama-3-8b-latent*)
      ratio=$([[ $spec == *:* ]] && echo "${spec#*:}" || echo 0.4)
      dense=$SYNTH/synth-llama-3-8b-0
      dir=$SYNTH/synth-llama-3-8b-latent-$ratio
      if [ ! -f "$dir/config.json" ]; then
        synth llama-3-8b 0 bf16 "$dense"
        /usr/bin/time -f "onnx_latent peak_rss_kb %M, %e s" "$BUILD/bench/onnx_latent" --model "$dense" --ratio "$ratio" \
          --dtype BF16 --out "$dir" >&2
      fi
      [ "${KEEP:-0}" = 1 ] || rm -rf "$dense"
      name=llama-3-8b-latent-$ratio
      { echo "# generate on the Llama-3-8B shape's latent $ratio (bf16, 32 layers, random factors), --weights stored";
        echo; echo '```'; generate_runs "$dir" "$name"; echo '```'; } > "$OUT/stored-dtype-$name-generate.md"
      cat "$OUT/stored-dtype-$name-generate.md"
      "$BUILD/bench/stored_dtype" --model "$dir" --name "$name" --weights stored-mapped,stored --runs "$RUNS" --tokens 32
      [ "${KEEP:-0}" = 1 ] || rm -rf "$dir"
      ;;
    llama-3-8b*)
      layers=$([[ $spec == *:* ]] && echo "${spec#*:}" || echo 0)
      dir=$SYNTH/synth-llama-3-8b-$layers
      synth llama-3-8b "$layers" bf16 "$dir"
      { echo "# generate on the Llama-3-8B shape (bf16, layers: ${layers/#0/32}), --weights stored"; echo;
        echo '```'; generate_runs "$dir" llama-3-8b; echo '```'; } > "$OUT/stored-dtype-llama-3-8b-generate.md"
      cat "$OUT/stored-dtype-llama-3-8b-generate.md"
      "$BUILD/bench/stored_dtype" --model "$dir" --name "llama-3-8b-$layers" --weights stored-mapped,stored --runs "$RUNS" --tokens 32
      [ "${KEEP:-0}" = 1 ] || rm -rf "$dir"
      ;;
    latent)
      name=$(basename "$LATENT")
      { echo "# generate on $name, --weights stored"; echo; echo '```'; generate_runs "$LATENT" "$name"; echo '```'; } \
        > "$OUT/stored-dtype-$name-generate.md"
      cat "$OUT/stored-dtype-$name-generate.md"
      "$BUILD/bench/stored_dtype" --model "$LATENT" --name "$name" --weights stored --runs "$RUNS" --tokens 32
      ;;
  esac
done
