#!/usr/bin/env bash
# Data-parallel calibration on the OPT-1.3B shape (random weights from latentllm-synth, never committed),
# first two layers: 1 rank x 1 thread, 1 rank x 2 threads, 2 ranks x 1 thread, interleaved, with the
# sgemm peak measured before and after and the load average. Per stage seconds (rank 0's), the bytes rank
# 0 sent and received through collectives and their time, and the checkpoint digests (the same for every
# configuration). Writes bench/results/mpi/opt-1.3b.md.
#   bench/run_mpi.sh [NSAMPLES] [SEQLEN] [REPEATS]     default 8 2048 1
# EXTRA: more compress options, e.g. EXTRA="--ud-min-tokens-per-ffn 0" to run joint up-down (the
# default preset skips it below 12 x ffn tokens, 98304 at this shape).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
N=${1:-8} L=${2:-2048} R=${3:-1}
cmake --build "$BUILD" --target sgemm_peak latentllm-cli latentllm-synth >/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/latentllm-bench-mpi.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
"$BUILD/tools/synth/latentllm-synth" --preset opt-1.3b --layers 2 --out "$TMP/model" \
  --tokenizers "$SHARED/data/tokenizers" >/dev/null
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
peak() {
  "$BUILD/bench/sgemm_peak" --benchmark_min_time=0.3 --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"]; print(round(max(x["FLOPS"] for x in b) / 1e9, 1))'
}
run() {  # name ranks threads
  local pre=()
  [ "$2" -gt 1 ] && pre=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$2")
  "${pre[@]}" "$BUILD/latentllm" compress --model "$TMP/model" --out "$TMP/$1" --force --ratio 0.3 --calib c4 \
    --calib-data "$C4" --nsamples "$N" --seqlen "$L" --batch $((N / 2)) --seed 0 --threads "$3" ${EXTRA:-} --json \
    2> "$TMP/$1.err" > "$TMP/$1.json"
  python3 - "$1" "$2" "$3" "$TMP/$1.json" "$(cat "$TMP/$1/model.safetensors" | sha256sum | cut -c1-16)" <<'PY'
import json, sys
name, k, t, f, digest = sys.argv[1:]
j = json.load(open(f)); s = j["stage_seconds"]; c = j["communication"]
print(f"| {k} x {t} | {s['total']:.1f} | {s['forward']:.1f} | {s['covariance']:.1f} | {s['output_statistics']:.1f} | "
      f"{s['decompositions']:.1f} | {c['bytes'] / 2**20 / 2:.0f} | {c['seconds'] / 2:.2f} | {digest} |")
PY
}
{
  echo "# Data-parallel calibration, OPT-1.3B shape, first 2 layers, $N x $L tokens${EXTRA:+, $EXTRA}"
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak before: $(peak) GFLOP/s"
  echo
  echo "| ranks x threads | total s | forward s | covariance s | output stats s | decompositions s | MiB communicated / layer (rank 0) | communication s / layer | checkpoint |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for _ in $(seq "$R"); do
    run k1t1 1 1
    run k1t2 1 2
    run k2t1 2 1
  done
  echo
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak after: $(peak) GFLOP/s"
} | tee "$TMP/out.md"
mkdir -p bench/results/mpi
cp "$TMP/out.md" bench/results/mpi/opt-1.3b.md
