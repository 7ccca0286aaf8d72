#!/usr/bin/env bash
# Issue 12 item 6: `--resume` across a large run. The same compression as bench/run_scale_e2e.sh
# (run that first: its checkpoint is the reference), killed with SIGKILL once layer KILL_AFTER is done,
# then continued with --resume; the two checkpoints must be byte-identical. Random-weight checkpoint
# (latentllm-synth): time and memory only. Results: bench/results/scale/<preset>-<N>x<L>-resume.md.
#   bench/run_scale_resume.sh [PRESET]      default: opt-1.3b
# Environment: NSAMPLES (16), SEQLEN (2048), RATIO (0.2), KILL_AFTER (8).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
BIN=${BIN:-$BUILD/latentllm}
preset=${1:-opt-1.3b}
n=${NSAMPLES:-16}
l=${SEQLEN:-2048}
k=${KILL_AFTER:-8}
dir=$BUILD/synth/$preset
ref=$BUILD/scale-out/$preset-${n}x${l}-e2e
out=$BUILD/scale-out/$preset-${n}x${l}-resume
res=bench/results/scale/$preset-${n}x${l}-resume
[ -f "$ref/config.json" ] || { echo "run bench/run_scale_e2e.sh $preset first (its checkpoint is the reference)" >&2; exit 1; }
rm -rf "$out" "$out.resume"
args=(compress --model "$dir" --out "$out" --method latentllm --ratio "${RATIO:-0.2}" --nsamples "$n" --seqlen "$l"
      --calib-data "$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl")
t0=$(date +%s.%N)
"$BIN" "${args[@]}" > /dev/null 2> "$res.log" &
pid=$!
until grep -q "^.*layer $k/[0-9]* done" "$res.log" 2>/dev/null; do
  kill -0 $pid 2>/dev/null || { echo "compress ended before layer $k" >&2; exit 1; }
  sleep 1
done
kill -9 $pid
wait $pid 2>/dev/null || true
t1=$(date +%s.%N)
"$BIN" "${args[@]}" --resume > /dev/null 2> "$res.resume.log"
t2=$(date +%s.%N)
same=yes
for f in "$ref"/*.safetensors "$ref"/config.json; do
  cmp -s "$f" "$out/$(basename "$f")" || same=no
done
restored=$(grep -o "layers 0\.\.[0-9]* restored" "$res.resume.log" | head -1 || true)
{
  echo "# --resume after SIGKILL: $preset, $n x $l (random weights: time and memory only)"
  echo
  echo "\`bench/run_scale_resume.sh\`: the run of \`bench/run_scale_e2e.sh\` again, killed (SIGKILL) once layer $k"
  echo "was done, then \`--resume\`."
  echo
  echo "| what | value |"
  echo "|---|---:|"
  echo "| killed after | $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') s (layer $k of the main pass done) |"
  echo "| the resumed run | $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.0f", b - a }') s ($restored) |"
  echo "| checkpoint byte-identical to the uninterrupted run's (\`cmp\`, every safetensors file and config.json) | $same |"
} > "$res.md"
cat "$res.md"
[ "$same" = yes ]
