#!/usr/bin/env bash
# The multimodal scale bench: LLaVA's real shapes with RANDOM weights (latentllm-synth presets
# llava-1.5-7b / llava-v1.6-vicuna-7b under build/synth, never committed; time and memory only, never
# quality), compressed at 20 % with the paper's calibration (compress --calib scienceqa: 64 ScienceQA
# train problems, each prompt with its image one sequence of its own length), split by stage against
# the sgemm/dgemm peaks measured in the same process, peak RSS, and the whole model's time projected from
# its first layers. Then, with EVAL_PROBLEMS, the dense model's ScienceQA evaluation time per problem
# (latentllm eval --protocol generate). Results: bench/results/scale/<preset>.{json,md}.
#   bench/run_scale_lmm.sh [PRESET[:LAYERS_IN_CHECKPOINT] ...]   default: llava-1.5-7b:2
# A preset with :K keeps K language-model layers (latentllm-synth --layers K; the vision tower stays whole)
# so that compress_time's eager float32 copy fits; the projection uses the preset's 32 layers.
# Environment: NSAMPLES (64), STOP (1 layer), THREADS (0 = all), PRESET (default), METHODS (latentllm),
# DATA (../shared/data/scienceqa-shapes), EVAL_PROBLEMS (0 = skip the eval timing; else the first N val
# problems, on 2- and 4-layer truncations, projected to all layers).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
DATA=${DATA:-$SHARED/data/scienceqa-shapes}
cmake --build "$BUILD" --target compress_time latentllm-synth latentllm-cli >/dev/null
mkdir -p bench/results/scale "$BUILD/synth"
specs=("$@")
[ ${#specs[@]} -eq 0 ] && specs=(llava-1.5-7b:2)
synth() {  # preset layers(0 = all) dir
  [ -f "$3/config.json" ] || "$BUILD/tools/synth/latentllm-synth" --preset "$1" --out "$3" --layers "$2" \
    --tokenizers "$SHARED/data/tokenizers" >&2
}
for spec in "${specs[@]}"; do
  preset=${spec%%:*}
  keep=$([[ $spec == *:* ]] && echo "${spec#*:}" || echo 0)
  dir=$BUILD/synth/$preset
  if [ "$keep" != 0 ]; then dir=$BUILD/synth/$preset-$keep; fi
  synth "$preset" "$keep" "$dir"
  real_layers=$("$BUILD/tools/synth/latentllm-synth" --list | awk -v p="$preset" '$1 == p { print $4 }')
  echo "load average before $preset: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$BUILD/bench/compress_time" --shared "$SHARED" --model "$dir" --methods "${METHODS:-latentllm}" \
    --calib scienceqa --calib-data "$DATA" --nsamples "${NSAMPLES:-64}" --stop-after-layers "${STOP:-1}" \
    --threads "${THREADS:-0}" --project-layers "${real_layers:-0}" --preset "${PRESET:-default}" \
    --out "bench/results/scale/$preset${SUFFIX:-}"
  if [ "${EVAL_PROBLEMS:-0}" != 0 ]; then
    # eval loads the language model eagerly in float32 (27 GB at 32 layers): it runs on 2- and 4-layer
    # truncations, and the time per problem at all layers is the 2-layer time plus 30 layers at the
    # per-layer difference.
    secs=()
    for k in 2 4; do
      tdir=$BUILD/synth/$preset-$k
      synth "$preset" "$k" "$tdir"
      echo "load average before the eval of $preset:$k: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
      /usr/bin/time -v "$BUILD/latentllm" eval --task scienceqa --model "$tdir" --data "$DATA" --split val \
        --max-problems "$EVAL_PROBLEMS" --threads "${THREADS:-0}" --json \
        >"$BUILD/synth/$preset-$k-eval.json" 2>"$BUILD/synth/$preset-$k-eval.log"
      grep -E "Maximum resident|Elapsed" "$BUILD/synth/$preset-$k-eval.log" >&2
      secs+=("$(grep -o '"eval_seconds": *[0-9.e+-]*' "$BUILD/synth/$preset-$k-eval.json" | grep -o '[0-9.e+-]*$')")
    done
    awk -v a="${secs[0]}" -v b="${secs[1]}" -v n="$EVAL_PROBLEMS" -v L="$real_layers" 'BEGIN {
      printf "eval: %.2f s a problem at 2 layers, %.2f at 4, projected %.1f at %d layers\n", a / n, b / n,
        (a + (b - a) / 2 * (L - 2)) / n, L }' >&2
  fi
done
