#!/usr/bin/env bash
# Speed bars of issues 3 and 4: the compression time of opt-tiny at 20 % (64 C4 windows of 512 tokens)
# with asvd-rootcov and latentllm, split by stage (sampling, layer forwards, covariance, each
# decomposition part, writing), with the achieved FLOP rates against this machine's sgemm and dgemm
# peaks measured in the same process. Writes bench/results/compress_time.{json,md}. Run on an idle machine.
#   bench/run_compress_time.sh [extra compress_time args]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
cmake --build "$BUILD" --target compress_time >/dev/null
mkdir -p bench/results
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD/bench/compress_time" --shared "$SHARED" --out bench/results/compress_time "$@"
