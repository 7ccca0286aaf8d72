#!/usr/bin/env bash
# Issue 12's scale bench: the first layers of real-shape checkpoints with RANDOM weights (written by
# latentllm-synth under build/synth, never committed; they measure time and memory only, never
# quality), compressed with latentllm at 20 % on C4 windows of 2048 tokens, split by stage with the
# rates against the sgemm/dgemm peaks measured in the same process, peak RSS, and the whole model's
# time projected from the layers run. Results: bench/results/scale/<preset>.{json,md}.
#   bench/run_scale.sh [PRESET[:LAYERS_IN_CHECKPOINT] ...]   default: opt-1.3b llama-3-8b:2
# A preset with :K is truncated to K layers (latentllm-synth --layers K) so that its f32 weights fit in
# memory; the projection then uses the preset's real layer count.
# Environment: NSAMPLES (64), SEQLEN (2048), STOP (1 layer), THREADS (0 = all), COV (auto: the preset's), PRESET (default:
# the CLI's --preset default, global ranks with their pre-pass; none = CompressOptions{}), RANK_ALLOC (the
# preset's; uniform or global), METHODS (latentllm; e.g. latentllm,latentllm/input-side for the same run with
# every module fitted from its input covariance, in the same process).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
cmake --build "$BUILD" --target compress_time latentllm-synth >/dev/null
mkdir -p bench/results/scale "$BUILD/synth"
specs=("$@")
[ ${#specs[@]} -eq 0 ] && specs=(opt-1.3b llama-3-8b:2)
for spec in "${specs[@]}"; do
  preset=${spec%%:*}
  keep=$([[ $spec == *:* ]] && echo "${spec#*:}" || echo 0)
  dir=$BUILD/synth/$preset
  if [ "$keep" != 0 ]; then dir=$BUILD/synth/$preset-$keep; fi
  if [ ! -f "$dir/config.json" ]; then
    "$BUILD/tools/synth/latentllm-synth" --preset "$preset" --out "$dir" --layers "$keep" \
      --tokenizers "$SHARED/data/tokenizers" >&2
  fi
  real_layers=$("$BUILD/tools/synth/latentllm-synth" --list | awk -v p="$preset" '$1 == p { print $4 }')
  echo "load average before $preset: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$BUILD/bench/compress_time" --shared "$SHARED" --model "$dir" --methods "${METHODS:-latentllm}" \
    --nsamples "${NSAMPLES:-64}" --seqlen "${SEQLEN:-2048}" --stop-after-layers "${STOP:-1}" \
    --threads "${THREADS:-0}" --covariance "${COV:-auto}" --project-layers "${real_layers:-0}" \
    --preset "${PRESET:-default}" ${RANK_ALLOC:+--rank-alloc "$RANK_ALLOC"} \
    --out "bench/results/scale/$preset${SUFFIX:-}"
done
