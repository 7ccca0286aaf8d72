#!/usr/bin/env bash
# Two builds of the CLI against each other on the OPT-1.3B shape (random weights from latentllm-synth,
# never committed), the first LAYERS layers (default 1): for each repeat, 1 x 1 and 2 x 1 of the baseline
# and of the candidate, interleaved, with the sgemm peak before and after and the load average. Reports
# the layers' seconds (stage_seconds.total), each build's 2 x 1 speed-up, candidate / baseline, and the
# checkpoint digests (one for all). Writes OUT (default bench/results/mpi/ab.md).
#   bench/run_mpi_ab.sh BASE_CLI NEW_CLI [NSAMPLES] [SEQLEN] [REPEATS]     default 4 2048 2
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
BASE=$1 NEW=$2 N=${3:-4} L=${4:-2048} R=${5:-2}
LAYERS=${LAYERS:-1}
OUT=${OUT:-bench/results/mpi/ab.md}
cmake --build "$BUILD" --target sgemm_peak latentllm-synth >/dev/null
TMP=$(mktemp -d "${TMPDIR:-/tmp}/latentllm-bench-ab.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
"$BUILD/tools/synth/latentllm-synth" --preset opt-1.3b --layers "$LAYERS" --out "$TMP/model" \
  --tokenizers "$SHARED/data/tokenizers" >/dev/null
C4=$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl
peak() {
  "$BUILD/bench/sgemm_peak" --benchmark_min_time=0.3 --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"]; print(round(max(x["FLOPS"] for x in b) / 1e9, 1))'
}
run() {  # cli ranks name -> "layers_seconds digest"
  local pre=()
  [ "$2" -gt 1 ] && pre=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$2")
  "${pre[@]}" "$1" compress --model "$TMP/model" --out "$TMP/$3" --force --ratio 0.3 --calib c4 \
    --calib-data "$C4" --nsamples "$N" --seqlen "$L" --batch $((N / 2)) --seed 0 --threads 1 --json \
    2> "$TMP/$3.err" > "$TMP/$3.json"
  echo "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stage_seconds"]["total"])' "$TMP/$3.json") $(sha256sum < "$TMP/$3/model.safetensors" | cut -c1-16)"
}
{
  echo "# Baseline against candidate, OPT-1.3B shape, first $LAYERS layer(s), $N x $L tokens"
  echo
  echo "baseline: $BASE; candidate: $NEW"
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak before: $(peak) GFLOP/s"
  echo
  echo "| repeat | build | 1 x 1 layers s | 2 x 1 layers s | 2 x 1 speed-up | checkpoints |"
  echo "|---|---|---|---|---|---|"
  for rep in $(seq "$R"); do
    for b in base new; do
      cli=$BASE; [ "$b" = new ] && cli=$NEW
      read -r t1 d1 <<< "$(run "$cli" 1 "$b-k1-$rep")"
      read -r t2 d2 <<< "$(run "$cli" 2 "$b-k2-$rep")"
      echo "| $rep | $b | $t1 | $t2 | $(python3 -c "print(f'{$t1 / $t2:.2f}x')") | $d1 $d2 |"
    done
  done
  echo
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); sgemm peak after: $(peak) GFLOP/s"
} | tee "$TMP/out.md"
mkdir -p "$(dirname "$OUT")"
cp "$TMP/out.md" "$OUT"
