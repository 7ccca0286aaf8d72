#!/usr/bin/env bash
# The compress memory plan against the measured peak (the whole run, both layers of TinyStories-656K,
# latentllm's default preset) over a range of calibration token counts, up to where the pass states
# exceed their limit (a quarter of physical memory) and every pass starts from the layer's input.
# Writes bench/results/memory_plan.md. Usage: bench/run_memory_plan.sh [BIN] [WINDOWS...]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/latentllm}
shift || true
WINDOWS=${*:-500 2000 8000 30000 60000}
SHARED=${LATENTLLM_SHARED:-../shared}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OUT=bench/results/memory_plan.md
{
  echo "# compress memory plan against the measured peak"
  echo
  echo "$(date -u +%F), $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(git rev-parse --short HEAD);"
  echo "TinyStories-656K, latentllm (default preset), C4 1000-document sample, --seqlen 128, all layers."
  echo "Pass states beyond a quarter of physical memory start every pass from the layer's input."
  echo
  echo "| windows | tokens | planned peak | measured peak | measured / planned |"
  echo "|---:|---:|---:|---:|---:|"
} > "$OUT"
for n in $WINDOWS; do
  "$BIN" compress --model "$SHARED/models/TinyStories-656K" --out "$TMP/out" --force --calib c4 \
    --calib-data "$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl" --nsamples "$n" --seqlen 128 --json \
    > "$TMP/r.json" 2> "$TMP/err.txt"
  python3 - "$n" "$TMP/r.json" >> "$OUT" <<'PY'
import json, sys
n = int(sys.argv[1]); j = json.load(open(sys.argv[2]))
p, m = j["planned_peak_bytes"], j["peak_rss_bytes"]
print(f"| {n} | {n*128} | {p/2**30:.2f} GiB | {m/2**30:.2f} GiB | {m/p:.3f} |")
PY
done
cat "$OUT"
