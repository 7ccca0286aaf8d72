#!/usr/bin/env bash
# The task graph's thread slots on one process: the first layer of the OPT-1.3B shape (random weights
# from latentllm-synth, never committed), N x L calibration tokens, --threads 1 and 2 interleaved REPEATS
# times, with the sgemm peak (bench/sgemm_peak) and the load average before and after, the CPU model,
# and per run: wall, layer time (stage_seconds.total), decompositions, the jobs' own seconds and how many
# ran on average, the process's CPU use ((user + system) / wall), the most decompositions run at once,
# the checkpoint digest (the same for every run).
# Writes OUT (default bench/results/threads_owners.md; the notes below the tables are written by hand).
#   bench/run_threads_owners.sh [NSAMPLES] [SEQLEN] [REPEATS]     default 4 2048 2
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
N=${1:-4} L=${2:-2048} R=${3:-2}
OUT=${OUT:-bench/results/threads_owners.md}
cmake --build "$BUILD" --target sgemm_peak latentllm-cli latentllm-synth >/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/latentllm-bench-threads.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
"$BUILD/tools/synth/latentllm-synth" --preset opt-1.3b --layers 1 --out "$TMP/model" \
  --tokenizers "$SHARED/data/tokenizers" >/dev/null 2>&1
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
peak() {
  "$BUILD/bench/sgemm_peak" --benchmark_min_time=0.3 --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"]; print(round(max(x["FLOPS"] for x in b) / 1e9, 1))'
}
run() {  # threads repeat
  /usr/bin/time -f "%e %U %S" -o "$TMP/time" "$BUILD/latentllm" compress --model "$TMP/model" --out "$TMP/t$1" \
    --force --ratio 0.3 --calib c4 --calib-data "$C4" --nsamples "$N" --seqlen "$L" --batch $((N / 2)) --seed 0 \
    --threads "$1" --json 2> "$TMP/t$1.err" > "$TMP/t$1.json"
  python3 - "$1" "$TMP/t$1.json" "$(cat "$TMP/time")" "$(sha256sum < "$TMP/t$1/model.safetensors" | cut -c1-16)" \
    "$TMP/base$2" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, os, sys
t, f, times, digest, base, load = sys.argv[1:]
wall, user, system = (float(x) for x in times.split())
s = json.load(open(f))["stage_seconds"]
layer, dec = s["total"], s["decompositions"]
if t == "1": open(base, "w").write(f"{layer} {dec}")
bl, bd = (float(x) for x in open(base).read().split())
busy = sum(jb["seconds"] for jb in s["decompositions_by_job"])
print(f"| {t} | {wall:.1f} | {layer:.1f} | {bl / layer:.2f}x | {dec:.1f} | {bd / dec:.2f}x | {busy:.1f} | "
      f"{busy / dec:.2f} | {(user + system) / wall:.2f} | {s['decompositions_at_once']} | {load} | {digest} |")
PY
}
{
  echo "# Thread slots of the task graph: OPT-1.3B shape, layer 0, $N x $L tokens, one process"
  echo
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak before: $(peak) GFLOP/s"
  echo
  echo "layer: stage_seconds.total (the layer-by-layer pipeline: forwards, statistics, decompositions);"
  echo "speed-ups against --threads 1 of the same repeat; CPU use: (user + system) / wall of the process;"
  echo "jobs s: the decompositions' own seconds summed (each where it ran); in flight: jobs s / decompositions s, the"
  echo "jobs running on average; at once: the most that ran at the same moment; load: the 1-minute load average after the run."
  echo
  echo "| threads | wall s | layer s | layer speed-up | decompositions s | decompositions speed-up | jobs s | in flight | CPU use (cores) | at once | load | checkpoint |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for rep in $(seq "$R"); do
    for t in 1 2; do run "$t" "$rep"; done
  done
  echo
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak after: $(peak) GFLOP/s"
} | tee "$TMP/out.md"
mkdir -p "$(dirname "$OUT")"
cp "$TMP/out.md" "$OUT"
