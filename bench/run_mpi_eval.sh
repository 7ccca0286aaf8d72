#!/usr/bin/env bash
# Data-parallel ScienceQA (`latentllm eval`) on llava-shapes-tiny, the 500 val problems by LLaVA's
# generate protocol: 1 rank x 1 thread, 1 rank x 2 threads, 2 ranks x 1 thread, interleaved, with the
# sgemm peak measured before and after and the load average. Per run the evaluation's seconds (rank 0's
# wall time from the first problem to the gathered result), problems/s, the accuracy and the digest of
# the --json without its timings and "processes" (the same for every configuration). Writes
# bench/results/mpi/eval.md.
#   bench/run_mpi_eval.sh [REPEATS] [PROTOCOL]     default 3 generate
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
R=${1:-3} PROTOCOL=${2:-generate}
cmake --build "$BUILD" --target sgemm_peak latentllm-cli >/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/latentllm-bench-mpi-eval.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
peak() {
  "$BUILD/bench/sgemm_peak" --benchmark_min_time=0.3 --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"]; print(round(max(x["FLOPS"] for x in b) / 1e9, 1))'
}
run() {  # ranks threads
  local pre=()
  [ "$1" -gt 1 ] && pre=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$1")
  "${pre[@]}" "$BUILD/latentllm" eval --model "$SHARED/models/llava-shapes-tiny" --data "$SHARED/data/scienceqa-shapes" \
    --protocol "$PROTOCOL" --threads "$2" --json 2> /dev/null > "$TMP/out.json"
  python3 - "$1" "$2" "$TMP/out.json" <<'PY'
import hashlib, json, sys
k, t, f = sys.argv[1:]
j = json.load(open(f))
digest = hashlib.sha256(json.dumps({x: v for x, v in j.items() if x not in ("eval_seconds", "problems_per_s", "processes")},
                                   sort_keys=True).encode()).hexdigest()[:16]
print(f"| {k} x {t} | {j['eval_seconds']:.2f} | {j['problems_per_s']:.0f} | {j['accuracy_percent']['AVG']:.2f} | {digest} |")
PY
}
{
  echo "# Data-parallel ScienceQA eval, llava-shapes-tiny, 500 val problems, protocol $PROTOCOL"
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak before: $(peak) GFLOP/s"
  echo
  echo "| ranks x threads | eval s | problems/s | accuracy % | --json digest (timings and processes aside) |"
  echo "|---|---|---|---|---|"
  for _ in $(seq "$R"); do
    run 1 1
    run 1 2
    run 2 1
  done
  echo
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak after: $(peak) GFLOP/s"
} | tee "$TMP/out.md"
mkdir -p bench/results/mpi
cp "$TMP/out.md" bench/results/mpi/eval.md
