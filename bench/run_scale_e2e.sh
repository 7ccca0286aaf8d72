#!/usr/bin/env bash
# Issue 12 item 5/6: one complete `latentllm compress` run on a real-shape checkpoint with RANDOM weights
# (latentllm-synth under $BUILD/synth, never committed: time and memory only, never quality), the
# sgemm peak measured just before it, the ETA printed after the first layer against the real total,
# peak RSS, and the written checkpoint evaluated by `ppl` (it must load and run).
# Results: bench/results/scale/<preset>-<N>x<L>-e2e.{json,md} (+ the stderr log, .log).
#   bench/run_scale_e2e.sh [PRESET]      default: opt-1.3b
# Environment: NSAMPLES (16), SEQLEN (2048), RATIO (0.2), EXTRA (more compress options).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
BIN=${BIN:-$BUILD/latentllm}
preset=${1:-opt-1.3b}
n=${NSAMPLES:-16}
l=${SEQLEN:-2048}
dir=$BUILD/synth/$preset
if [ ! -f "$dir/config.json" ]; then
  "$BUILD/tools/synth/latentllm-synth" --preset "$preset" --out "$dir" --tokenizers "$SHARED/data/tokenizers" >&2
fi
name=$preset-${n}x${l}-e2e
res=bench/results/scale/$name
out=$BUILD/scale-out/$name
mkdir -p "$(dirname "$out")" bench/results/scale
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
peak=$("$BUILD/bench/sgemm_peak" --benchmark_filter='BM_SgemmSquare/m:2048' --benchmark_format=json 2>/dev/null |
  python3 -c 'import json,sys; print(max(b["FLOPS"] for b in json.load(sys.stdin)["benchmarks"]) / 1e9)')
start=$(date +%s.%N)
# shellcheck disable=SC2086
"$BIN" compress --model "$dir" --out "$out" --force --method latentllm --ratio "${RATIO:-0.2}" \
  --nsamples "$n" --seqlen "$l" --calib-data "$SHARED/data/c4/c4-train.00000-of-01024.first1000.jsonl" \
  --json ${EXTRA:-} > "$res.json.tmp" 2> "$res.log"
end=$(date +%s.%N)
"$BIN" ppl --model "$out" --dataset text --data "$SHARED/data/wikitext2/wiki.test.raw" --seqlen "$l" \
  --max-windows 2 --json > "$res.ppl.tmp" 2>/dev/null
python3 - "$res" "$start" "$end" "$peak" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" "$n" "$l" <<'EOF'
import json, re, sys
res, start, end, peak, lb, la, n, l = sys.argv[1:]
wall = float(end) - float(start)
rep = json.load(open(res + ".json.tmp"))
ppl = json.load(open(res + ".ppl.tmp"))
log = open(res + ".log").read()
# "layer 1/24 done in 62.0s (elapsed 70.1s, ETA 1430.0s)" of the main pass (not the pre-pass's lines).
eta = [(int(m.group(1)), float(m.group(2)), float(m.group(3)))
       for m in re.finditer(r"^(?!.*pre-pass).*?(\d+)/\d+ done in [\d.]+s \(elapsed ([\d.]+)s, ETA ([\d.]+)s\)", log, re.M)]
out = {"preset": res.split("/")[-1], "nsamples": int(n), "seqlen": int(l), "wall_seconds": wall,
       "sgemm_peak_gflops": float(peak), "load_before": lb, "load_after": la,
       "peak_rss_bytes": rep.get("peak_rss_bytes"), "planned_peak_bytes": rep.get("planned_peak_bytes"),
       "report": rep, "eta": [{"layer": a, "elapsed": b, "eta": c} for a, b, c in eta],
       "ppl_check": {"ppl": ppl.get("ppl"), "tokens_per_s": ppl.get("tokens_per_s")}}
json.dump(out, open(res + ".json", "w"), indent=2)
gib = 1 << 30
lines = [f"# Complete run: {out['preset']} (random weights: time and memory only, never quality)", "",
         f"`bench/run_scale_e2e.sh`: `latentllm compress --method latentllm --ratio 0.2` (the default preset), "
         f"{n} C4 windows of {l} tokens. sgemm peak {float(peak):.1f} GFLOP/s measured just before; load average "
         f"before / after {lb} / {la}.", "",
         "| what | value |", "|---|---:|",
         f"| wall time, compress (load, calibration, pre-pass, layers, write) | {wall:.0f} s ({wall / 60:.1f} min) |",
         f"| peak RSS | {(rep.get('peak_rss_bytes') or 0) / gib:.2f} GiB (plan {(rep.get('planned_peak_bytes') or 0) / gib:.2f} GiB) |"]
lines.append(f"| rank allocation pre-pass | {rep.get('prepass_seconds') or 0:.1f} s |")
sec = rep.get("stage_seconds", rep.get("seconds", {}))
for k in sorted(sec):
    if isinstance(sec[k], (int, float)):
        lines.append(f"| seconds: {k} | {sec[k]:.1f} |")
if eta:
    a, b, c = eta[0]
    real_layers = eta[-1][1]
    lines.append(f"| ETA after layer {a}: predicted layers total | {b + c:.0f} s (real {real_layers:.0f} s, "
                 f"{100 * (b + c - real_layers) / real_layers:+.1f} %) |")
    mid = eta[len(eta) // 4]
    lines.append(f"| ETA after layer {mid[0]}: predicted | {mid[1] + mid[2]:.0f} s "
                 f"({100 * (mid[1] + mid[2] - real_layers) / real_layers:+.1f} %) |")
lines.append(f"| the checkpoint evaluates (`ppl`, 2 WikiText-2 windows) | ppl {ppl.get('ppl')}, "
             f"{ppl.get('tokens_per_s', 0):.1f} tokens/s |")
open(res + ".md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
rm -f "$res.json.tmp" "$res.ppl.tmp"
