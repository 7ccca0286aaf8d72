#!/usr/bin/env bash
# compress with the weights kept as stored (--weights stored, the default) against float32 weights
# (--weights f32) on a truncated real-shape checkpoint with RANDOM weights (latentllm-synth; time and
# memory only, never quality): the memory plan's peak and the measured peak RSS (/usr/bin/time -f %M) of
# each, the sgemm peak and the load average measured in the same script, and whether the two checkpoints
# are byte-identical (with STOP, --stop-after-layers STOP: the saved factors of those layers). The
# synthetic checkpoint and the outputs live under $TMPDIR and are removed.
# Results: bench/results/scale/stored-weights-<preset>-<L>l[-stop<S>].{json,md}.
#   bench/run_stored_compress.sh [PRESET]      default: llama-3-8b
# Environment: LAYERS (2), DTYPE (bf16), METHOD (plain-svd), NSAMPLES (2), SEQLEN (128), STOP (0: all layers).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
BIN=${BIN:-$BUILD/latentllm}
preset=${1:-llama-3-8b}
layers=${LAYERS:-2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/stored-compress.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$BUILD/tools/synth/latentllm-synth" --preset "$preset" --dtype "${DTYPE:-bf16}" --layers "$layers" \
  --out "$tmp/model" --tokenizers "$SHARED/data/tokenizers" >&2
stop=${STOP:-0}
res=bench/results/scale/stored-weights-$preset-${layers}l$([ "$stop" = 0 ] || echo "-stop$stop")
mkdir -p bench/results/scale
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
peak=$("$BUILD/bench/sgemm_peak" --benchmark_filter='BM_SgemmSquare/m:2048' --benchmark_format=json 2>/dev/null |
  python3 -c 'import json,sys; print(max(b["FLOPS"] for b in json.load(sys.stdin)["benchmarks"]) / 1e9)')
for w in f32 stored; do
  start=$(date +%s.%N)
  /usr/bin/time -f %M -o "$tmp/$w.rss" "$BIN" compress --model "$tmp/model" --out "$tmp/out-$w" \
    --method "${METHOD:-plain-svd}" --ratio 0.4 --nsamples "${NSAMPLES:-2}" --seqlen "${SEQLEN:-128}" \
    --calib-data "$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl" --weights "$w" --json \
    --stop-after-layers "$stop" --verbose \
    > "$tmp/$w.json" 2> "$tmp/$w.log"
  echo "$(date +%s.%N) - $start" | bc > "$tmp/$w.wall"
  cut -d' ' -f1-3 /proc/loadavg > "$tmp/$w.load"
done
same=true
if [ "$stop" = 0 ]; then
  for f in model.safetensors config.json; do cmp -s "$tmp/out-f32/$f" "$tmp/out-stored/$f" || same=false; done
else
  for ((i = 0; i < stop; i++)); do
    cmp -s "$tmp/out-f32.resume/layer-$i.safetensors" "$tmp/out-stored.resume/layer-$i.safetensors" || same=false
  done
fi
python3 - "$tmp" "$res" "$preset" "$layers" "$peak" "$load_before" "$same" "${METHOD:-plain-svd}" \
  "${NSAMPLES:-2}" "${SEQLEN:-128}" "${DTYPE:-bf16}" "$stop" <<'EOF'
import json, re, sys
tmp, res, preset, layers, peak, lb, same, method, n, l, dtype, stop = sys.argv[1:]
gib = 1 << 30
runs = {}
for w in ("f32", "stored"):
    rep = json.load(open(f"{tmp}/{w}.json"))
    log = open(f"{tmp}/{w}.log").read()
    plan = log[log.index("compress (lazy layers)"):].split("\ncalibration")[0]
    runs[w] = {"peak_rss_bytes_time": int(open(f"{tmp}/{w}.rss").read().split()[-1]) * 1024,
               "peak_rss_bytes": rep["peak_rss_bytes"], "planned_peak_bytes": rep["planned_peak_bytes"],
               "weights": rep["weights"], "wall_seconds": float(open(f"{tmp}/{w}.wall").read()),
               "load_after": open(f"{tmp}/{w}.load").read().strip(), "plan": plan}
out = {"preset": preset, "layers": int(layers), "dtype": dtype, "method": method, "nsamples": int(n),
       "seqlen": int(l), "stop_after_layers": int(stop), "sgemm_peak_gflops": float(peak), "load_before": lb,
       "checkpoints_identical": same == "true", "runs": runs}
json.dump(out, open(res + ".json", "w"), indent=2)
f, s = runs["f32"], runs["stored"]
lines = [f"# compress --weights f32 vs stored: {preset} shape, {layers} layers, {dtype} (random weights)", "",
         f"`bench/run_stored_compress.sh`: `latentllm compress --method {method} --ratio 0.4 --nsamples {n} "
         f"--seqlen {l}`{f' --stop-after-layers {stop}' if stop != '0' else ''} on C4, `--weights f32` then "
         f"`--weights stored`, one after the other. sgemm peak "
         f"{float(peak):.1f} GFLOP/s measured just before; load average before {lb}, after each run "
         f"{f['load_after']} / {s['load_after']}. "
         + ("Checkpoints byte-identical (model.safetensors and config.json): " if stop == "0" else
            f"Saved factors of the first {stop} layer(s) byte-identical (<out>.resume/layer-<i>.safetensors): ")
         + f"{'yes' if same == 'true' else 'NO'}.", "",
         "| --weights | plan's peak | peak RSS (/usr/bin/time) | wall |", "|---|---:|---:|---:|"]
for w in ("f32", "stored"):
    r = runs[w]
    lines.append(f"| {w} | {r['planned_peak_bytes'] / gib:.2f} GiB | {r['peak_rss_bytes_time'] / gib:.2f} GiB | "
                 f"{r['wall_seconds']:.0f} s |")
for w in ("f32", "stored"):
    lines += ["", f"Plan with `--weights {w}`:", "", "```", runs[w]["plan"], "```"]
open(res + ".md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
