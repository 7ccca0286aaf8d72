#!/usr/bin/env bash
# Peak RSS and time of `latentllm export` (onnx and hf) of the OPT-1.3B-shape latent checkpoint (random
# factors at latentllm's planned ranks, bench/onnx_latent), this build against a baseline binary
# (BASE_BIN, default the main checkout's build), alternating, with the sgemm peak, the read bandwidth and
# the load average measured before and after in the same run; checks that both write the same bytes.
# Results: bench/results/export/<preset>.md.
#   BASE_BIN=/path/to/latentllm bench/run_export_memory.sh [preset] [ratio]    default: opt-1.3b 0.3
# Random weights (latentllm-synth): memory and time only. Checkpoints under $EXPORT_BENCH_DIR (default
# /tmp/latentllm-export-bench), deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
BASE=${BASE_BIN:-/work/main/build/latentllm}
PRESET=${1:-opt-1.3b}
RATIO=${2:-0.3}
ROUNDS=${ROUNDS:-2}
W=${EXPORT_BENCH_DIR:-/tmp/latentllm-export-bench}
mkdir -p bench/results/export "$W"
trap 'rm -rf "$W"' EXIT

"$BUILD/tools/synth/latentllm-synth" --preset "$PRESET" --out "$W/dense" --tokenizers "$SHARED/data/tokenizers" --force >&2
"$BUILD/bench/onnx_latent" --model "$W/dense" --ratio "$RATIO" --out "$W/latent"
rm -rf "$W/dense"
latent_bytes=$(du -cb "$W/latent/model.safetensors" | tail -1 | cut -f1)

machine_before=$("$BUILD/bench/onnx_latent" --machine 1)
rows=""
for r in $(seq "$ROUNDS"); do
  for fmt in onnx hf; do
    for which in base new; do
      bin=$BASE; [ "$which" = new ] && bin=$BUILD/latentllm
      /usr/bin/time -f "%M %e" -o "$W/time" "$bin" export --model "$W/latent" --out "$W/$which-$fmt" --format "$fmt" -q
      read -r rss_kb secs < "$W/time"
      rows+="| $r | $fmt | $which | $(echo "scale=3; $rss_kb / 1048576" | bc) | $secs | $(cut -d' ' -f1-3 /proc/loadavg) |"$'\n'
      echo "round $r $fmt $which: ${rss_kb} KiB ${secs} s" >&2
    done
    same=identical
    for f in $(cd "$W/base-$fmt" && find . -type f); do cmp -s "$W/base-$fmt/$f" "$W/new-$fmt/$f" || same="DIFFERENT ($f)"; done
    rows+="| $r | $fmt | bytes base = new | $same | | |"$'\n'
    rm -rf "$W/base-$fmt" "$W/new-$fmt"
  done
done
machine_after=$("$BUILD/bench/onnx_latent" --machine 1)

{
  echo "# export peak RSS and time: $PRESET latent $RATIO (random factors), baseline vs this build"
  echo
  echo "\`bench/run_export_memory.sh\` ($(date -u +%Y-%m-%d), $(nproc) cores). Latent model.safetensors: $latent_bytes bytes."
  echo "Baseline: \`$BASE\`; new: \`$BUILD/latentllm\` ($(git rev-parse --short HEAD)). Alternating, $ROUNDS rounds."
  echo
  echo "Machine before: \`$machine_before\`"
  echo
  echo "Machine after: \`$machine_after\`"
  echo
  echo "| round | format | binary | peak RSS GiB | seconds | load 1/5/15 min |"
  echo "|---|---|---|---|---|---|"
  printf '%s' "$rows"
} > "bench/results/export/$PRESET.md"
cat "bench/results/export/$PRESET.md"
