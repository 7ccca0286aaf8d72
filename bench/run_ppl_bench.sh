#!/usr/bin/env bash
# Speed bar of issue 2: sgemm peak of the linked BLAS, and the perplexity-evaluation throughput of
# opt-tiny on WikiText-2 at seqlen 512 with the linear layers' and LM head's achieved fraction of that
# peak. Writes bench/results/ppl_throughput.{json,md} (and sgemm_peak.json). Run on an idle machine.
#   bench/run_ppl_bench.sh [windows]     (default 128 of the 561 windows)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
cmake --build "$BUILD" --target sgemm_peak ppl_throughput >/dev/null
mkdir -p bench/results
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD/bench/sgemm_peak" --benchmark_min_time=0.3 --benchmark_format=console \
  --benchmark_out=bench/results/sgemm_peak.json --benchmark_out_format=json
"$BUILD/bench/ppl_throughput" --shared "$SHARED" --windows "${1:-128}" --out bench/results/ppl_throughput
