#!/usr/bin/env bash
# Issue 14 item 4: decode tokens/s at contexts 128, 512 and 2048 (where the model has the positions),
# dense vs latent 20 % and 40 %, against the roofline of the memory bandwidth measured in the same
# process; prefill against the sgemm peak; KV-cache bytes. Results: bench/results/decode/<name>.{json,md}.
#   bench/run_decode.sh [fixtures] [opt-1.3b] [llama-3-8b:LAYERS]      default: fixtures opt-1.3b
# fixtures: opt-tiny, stories260K and TinyStories-656K (512 positions), latent versions compressed by
# latentllm. Every decode and prefill is timed at the default threads and at 1, interleaved
# (the "Threads" table of each result).
# Presets: real-shape checkpoints with RANDOM weights written by latentllm-synth under $BUILD/synth
# (never committed; speed only), latent versions by random factors at latentllm's planned ranks (see
# bench/decode.cpp). llama-3-8b:K keeps K layers so that its float32 weights fit in memory.
# Run on an idle machine: every figure is a memory-bandwidth or sgemm rate.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
cmake --build "$BUILD" --target decode latentllm-synth >/dev/null
mkdir -p bench/results/decode "$BUILD/synth"
specs=("$@")
[ ${#specs[@]} -eq 0 ] && specs=(fixtures opt-1.3b)
for spec in "${specs[@]}"; do
  echo "load average before $spec: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  if [ "$spec" = fixtures ]; then
    # No sleeping-pool arm: a step of these models takes 0.1-2 ms, and alternating the pool's
    # behaviour every step measures the transitions (futex wake-ups) more than either pool.
    "$BUILD/bench/decode" --shared "$SHARED" --model "$SHARED/models/opt-tiny" --name opt-tiny --steps 64 \
      --contexts 128,512 --prefill 128 --pool-baseline 0
    "$BUILD/bench/decode" --shared "$SHARED" --model "$SHARED/models/stories260K/hf" --name stories260K \
      --steps 64 --contexts 128,512 --prefill 128 --pool-baseline 0
    "$BUILD/bench/decode" --shared "$SHARED" --model "$SHARED/models/TinyStories-656K" --name TinyStories-656K \
      --steps 64 --contexts 128,512 --prefill 128 --pool-baseline 0
    continue
  fi
  preset=${spec%%:*}
  keep=$([[ $spec == *:* ]] && echo "${spec#*:}" || echo 0)
  dir=$BUILD/synth/$preset
  [ "$keep" != 0 ] && dir=$BUILD/synth/$preset-$keep
  if [ ! -f "$dir/config.json" ]; then
    "$BUILD/tools/synth/latentllm-synth" --preset "$preset" --out "$dir" --layers "$keep" \
      --tokenizers "$SHARED/data/tokenizers" >&2
  fi
  "$BUILD/bench/decode" --shared "$SHARED" --model "$dir" --name "$(basename "$dir")" --latent random --steps "${STEPS:-16}" \
    --contexts 128,512,2048 --prefill 128
done
