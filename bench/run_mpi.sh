#!/usr/bin/env bash
# MPI on the OPT-1.3B shape (random weights from latentllm-synth, never committed), the first LAYERS
# layers (default 2): 1 rank x 1 thread, 1 rank x 2 threads, 2 ranks x 1 thread, interleaved, with the
# sgemm peak measured before and after and the load average. Per stage seconds (rank 0's; the
# decompositions split by stage, and per job with the rank that ran it), the bytes rank 0 sent and
# received through collectives and their time, the speed-up against 1 x 1 of the same repeat, and the
# checkpoint digests (the same for every configuration with 1 thread). Writes OUT (default
# bench/results/mpi/opt-1.3b.md, or opt-1.3b-<LAYERS>layer.md when LAYERS is not 2).
#   bench/run_mpi.sh [NSAMPLES] [SEQLEN] [REPEATS]     default 8 2048 1
# EXTRA: more compress options, e.g. EXTRA="--ud-min-tokens-per-ffn 0" to run joint up-down (the
# default preset skips it below 12 x ffn tokens, 98304 at this shape). CONFIGS: the ranks x threads to
# run, default "1x1 1x2 2x1".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
N=${1:-8} L=${2:-2048} R=${3:-1}
LAYERS=${LAYERS:-2}
CONFIGS=${CONFIGS:-1x1 1x2 2x1}
if [ "$LAYERS" = 2 ]; then OUT=${OUT:-bench/results/mpi/opt-1.3b.md}; else OUT=${OUT:-bench/results/mpi/opt-1.3b-${LAYERS}layer.md}; fi
cmake --build "$BUILD" --target sgemm_peak latentllm-cli latentllm-synth >/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/latentllm-bench-mpi.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
"$BUILD/tools/synth/latentllm-synth" --preset opt-1.3b --layers "$LAYERS" --out "$TMP/model" \
  --tokenizers "$SHARED/data/tokenizers" >/dev/null
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
peak() {
  "$BUILD/bench/sgemm_peak" --benchmark_min_time=0.3 --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"]; print(round(max(x["FLOPS"] for x in b) / 1e9, 1))'
}
run() {  # name ranks threads repeat
  local pre=()
  [ "$2" -gt 1 ] && pre=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$2")
  local t0 t1
  t0=$(date +%s.%N)
  "${pre[@]}" "$BUILD/latentllm" compress --model "$TMP/model" --out "$TMP/$1" --force --ratio 0.3 --calib c4 \
    --calib-data "$C4" --nsamples "$N" --seqlen "$L" --batch $((N / 2)) --seed 0 --threads "$3" ${EXTRA:-} --json \
    2> "$TMP/$1.err" > "$TMP/$1.json"
  t1=$(date +%s.%N)
  python3 - "$1" "$2" "$3" "$TMP/$1.json" "$(cat "$TMP/$1/model.safetensors" | sha256sum | cut -c1-16)" \
    "$(echo "$t1 - $t0" | bc)" "$LAYERS" "$TMP/base$4" "$TMP/jobs.md" <<'PY'
import json, os, sys
name, k, t, f, digest, wall, layers, base, jobs = sys.argv[1:]
wall, layers = float(wall), int(layers)
j = json.load(open(f)); s = j["stage_seconds"]; c = j["communication"]; parts = s["decompositions_by_part"]
if name.startswith("k1t1"): open(base, "w").write(f"{wall} {s['total']}")
bw, bl = (float(x) for x in open(base).read().split()) if os.path.exists(base) else (float("nan"),) * 2
print(f"| {k} x {t} | {wall:.1f} | {bw / wall:.2f}x | {j['prepass_seconds']:.1f} | {s['total']:.1f} | {bl / s['total']:.2f}x | "
      f"{s['forward']:.1f} | {s['covariance']:.1f} | {s['output_statistics']:.1f} | {s['decompositions']:.1f} | "
      f"{parts.get('joint-qk', 0):.1f} | {parts.get('local', 0):.1f} | {c['bytes'] / 2**20 / layers:.0f} | "
      f"{c['seconds'] / layers:.2f} | {digest} |")
with open(jobs, "a") as out:
    for jb in s["decompositions_by_job"]:
        out.write(f"| {k} x {t} | {jb['layer']} | {jb['stage']} | {jb['what'].split('.')[-1]} | {jb['rank']} | {jb['seconds']:.2f} |\n")
PY
}
{
  echo "# MPI, OPT-1.3B shape, first $LAYERS layer(s), $N x $L tokens${EXTRA:+, $EXTRA}"
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak before: $(peak) GFLOP/s"
  echo
  echo "wall: the whole command (pre-pass, layers, checkpoint); layers: the layer-by-layer pipeline (stage_seconds.total);"
  echo "speed-ups against 1 x 1 of the same repeat. Seconds are rank 0's; joint-qk and local are the seconds of the"
  echo "stages' decompositions wherever they ran (per job below), so under 2 ranks they may exceed the wall time."
  echo
  echo "| ranks x threads | wall s | wall speed-up | pre-pass s | layers s | layers speed-up | forward s | covariance s | output stats s | decompositions s | joint-qk s | local s | MiB communicated / layer (rank 0) | communication s / layer | checkpoint |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for rep in $(seq "$R"); do
    for c in $CONFIGS; do run "k${c%x*}t${c#*x}" "${c%x*}" "${c#*x}" "$rep"; done
  done
  echo
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak after: $(peak) GFLOP/s"
  echo
  echo "Decompositions per job (the rank that ran it, its seconds there):"
  echo
  echo "| ranks x threads | layer | stage | modules: part | rank | seconds |"
  echo "|---|---|---|---|---|---|"
  cat "$TMP/jobs.md"
} | tee "$TMP/out.md"
mkdir -p "$(dirname "$OUT")"
cp "$TMP/out.md" "$OUT"
