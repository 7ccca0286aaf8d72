#!/usr/bin/env bash
# Continuous batching in `latentllm serve`: aggregate greedy decode tokens/s of 1, 2, 4, 8 concurrent streams
# (Model::forward_batch, the step serve runs) on the OPT-1.3B shape in F16, the sgemm peak and the memory
# bandwidth measured in the same process, and the concurrent 2048-token conversations of one --max-memory,
# dense against latent 40 % with a latent KV cache. Results: bench/results/serve/<name>.{json,csv}.
#   bench/run_serve.sh [SYNTH_DIR]      default: /tmp/latentllm-synth/opt-1.3b (random weights, never committed)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
dir=${1:-/tmp/latentllm-synth/opt-1.3b}
cmake --build "$BUILD" --target serve_batch latentllm-synth >/dev/null
if [ ! -f "$dir/config.json" ]; then
  "$BUILD/tools/synth/latentllm-synth" --preset opt-1.3b --dtype f16 --out "$dir" --tokenizers "$SHARED/data/tokenizers" >&2
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$BUILD/bench/serve_batch" --model "$dir" --name opt-1.3b-f16 --steps "${STEPS:-16}" --context 128 --rounds "${ROUNDS:-3}" \
  --max-memory "${MAX_MEMORY:-20G}" --ratio 0.4
