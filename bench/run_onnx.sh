#!/usr/bin/env bash
# ONNX Runtime against latentllm on the OPT-1.3B shape: `latentllm export --format onnx` of a latent
# checkpoint (random factors at latentllm's planned ranks for --ratio, bench/onnx_latent), then greedy
# decode tokens/s of `latentllm generate` and of onnxruntime-node (tests/ort/bench_decode.js) on the
# same prompt, interleaved, at the same thread count; the sgemm peak and the read bandwidth measured in
# the same run, before and after. Results: bench/results/onnx/<preset>.{md,json}.
#   bench/run_onnx.sh [preset] [ratio]          default: opt-1.3b 0.3
# Random weights (latentllm-synth): speed only. The checkpoints live under $ONNX_BENCH_DIR (default
# /tmp/latentllm-onnx-bench) and are deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
PRESET=${1:-opt-1.3b}
RATIO=${2:-0.3}
STEPS=${STEPS:-32}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-$(nproc)}
W=${ONNX_BENCH_DIR:-/tmp/latentllm-onnx-bench}
PROMPT="Once upon a time there was a little robot who lived in a small town by the sea. Every morning it"
cmake --build "$BUILD" --target latentllm-cli latentllm-synth onnx_latent >/dev/null
mkdir -p bench/results/onnx "$W"
trap 'rm -rf "$W"' EXIT

"$BUILD/tools/synth/latentllm-synth" --preset "$PRESET" --out "$W/dense" --tokenizers "$SHARED/data/tokenizers" --force >&2
"$BUILD/bench/onnx_latent" --model "$W/dense" --ratio "$RATIO" --out "$W/latent"
rm -rf "$W/dense"
t0=$(date +%s.%N)
/usr/bin/time -f "%M" -o "$W/export.rss" "$BUILD/latentllm" export --model "$W/latent" --out "$W/onnx" --format onnx -q
export_s=$(echo "$(date +%s.%N) - $t0" | bc)
export_bytes=$(du -cb "$W/onnx/onnx" | tail -1 | cut -f1)
params=$("$BUILD/latentllm" inspect --model "$W/latent" --json | sed -n '/^{/,$p' | node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>console.log(JSON.parse(s).model_params))")

machine_before=$("$BUILD/bench/onnx_latent" --machine 1)
runs="[]"
for r in $(seq "$ROUNDS"); do
  # latentllm with the float32 weights the graph holds (the same bytes per token), then as stored (F16).
  ours=$(/usr/bin/time -f "%M" -o "$W/ours.rss" "$BUILD/latentllm" generate --model "$W/latent" --prompt "$PROMPT" \
           --max-new-tokens "$STEPS" --temperature 0 --threads "$THREADS" --weights f32 --json -q | sed -n '/^{/,$p')
  ids=$(echo "$ours" | node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>console.log(JSON.stringify(JSON.parse(s).prompt_tokens)))")
  steps=$(echo "$ours" | node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>console.log(JSON.parse(s).tokens.length))")
  ort=$(/usr/bin/time -f "%M" -o "$W/ort.rss" node tests/ort/bench_decode.js "$W/onnx" "$THREADS" "$ids" "$steps")
  ours16=$("$BUILD/latentllm" generate --model "$W/latent" --prompt "$PROMPT" --max-new-tokens "$STEPS" --temperature 0 \
             --threads "$THREADS" --weights stored --json -q | sed -n '/^{/,$p')
  runs=$(node -e "const r=$runs; r.push({ours: $ours, ort: $ort, ours_stored: $ours16, ours_peak_rss_kb: $(cat "$W/ours.rss"), ort_peak_rss_kb: $(cat "$W/ort.rss")}); console.log(JSON.stringify(r))")
  echo "round $r: latentllm f32 $(echo "$ours" | grep -o '"decode_tokens_per_s":[0-9.e+-]*') ORT $ort" >&2
done
machine_after=$("$BUILD/bench/onnx_latent" --machine 1)

node - "$PRESET" "$RATIO" "$THREADS" "$export_s" "$export_bytes" "$(cat "$W/export.rss")" "$params" \
  "$machine_before" "$machine_after" "$runs" <<'JS'
const fs = require('fs');
const [preset, ratio, threads, exportS, exportBytes, exportRss, params, before, after, runsJson] = process.argv.slice(2);
const mb = JSON.parse(before), ma = JSON.parse(after), runs = JSON.parse(runsJson);
const doc = { preset, ratio: Number(ratio), threads: Number(threads), export_seconds: Number(exportS),
  export_bytes: Number(exportBytes), export_peak_rss_kb: Number(exportRss), latent_params: Number(params),
  machine_before: mb, machine_after: ma, runs };
fs.writeFileSync(`bench/results/onnx/${preset}.json`, JSON.stringify(doc, null, 2) + '\n');
const f = (x, d = 1) => Number(x).toFixed(d);
let md = `# ONNX Runtime vs latentllm: ${preset} latent ${Math.round(100 * ratio)} % (random factors, speed only)\n\n`;
md += '`bench/run_onnx.sh`: `latentllm export --format onnx` (f32, external data) of a latent checkpoint with random ' +
  "factors at latentllm's planned ranks (bench/onnx_latent), then greedy decoding of the same prompt by `latentllm " +
  'generate --temperature 0 --weights f32` (the float32 weights the graph holds, so both read the same bytes per token; ' +
  'its KV cache: `--kv-cache auto`) and by onnxruntime-node ' +
  `${runs[0].ort.ort} (tests/ort/bench_decode.js, the export's past/present), ${threads} threads each, interleaved; ` +
  'then `latentllm generate --weights stored` (the checkpoint\'s F16 weights, half the bytes) for reference.\n\n';
md += `Machine, same run: sgemm peak ${f(mb.sgemm_peak_gflops)} / ${f(ma.sgemm_peak_gflops)} GFLOP/s, read bandwidth ` +
  `${f(mb.read_bandwidth_gb_per_s)} / ${f(ma.read_bandwidth_gb_per_s)} GB/s, 1-minute load average ${f(mb.load_average, 2)} / ${f(ma.load_average, 2)} (before / after).\n\n`;
md += `Export: ${f(exportS)} s, ${f(exportBytes / 1e9, 2)} GB (onnx/model.onnx + model.onnx_data), peak RSS ${f(exportRss / 1048576, 2)} GiB; ` +
  `${params} parameters (the graph's float initializers are the checkpoint's tensors).\n\n`;
md += '| round | prompt tokens | decode steps | latentllm f32 decode tok/s | ORT decode tok/s | ORT / latentllm f32 | latentllm stored (F16) tok/s | latentllm f32 prefill s | ORT prefill s | peak RSS latentllm f32 / ORT GiB |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n';
runs.forEach((r, k) => {
  md += `| ${k + 1} | ${r.ours.prompt_tokens.length} | ${r.ort.decode_steps} | ${f(r.ours.decode_tokens_per_s, 2)} | ` +
    `${f(r.ort.decode_tokens_per_s, 2)} | ${f(r.ort.decode_tokens_per_s / r.ours.decode_tokens_per_s, 2)} | ` +
    `${f(r.ours_stored.decode_tokens_per_s, 2)} | ` +
    `${f(r.ours.prefill_seconds, 3)} | ${f(r.ort.prefill_s, 3)} | ${f(r.ours_peak_rss_kb / 1048576, 2)} / ${f(r.ort_peak_rss_kb / 1048576, 2)} |\n`;
});
md += `\nBandwidth roofline of a decode step (every weight read once, f32): ${f(4 * params / 1e9, 2)} GB per token, ` +
  `${f(mb.read_bandwidth_gb_per_s / (4 * params / 1e9), 2)} tok/s at the bandwidth measured before.\n`;
fs.writeFileSync(`bench/results/onnx/${preset}.md`, md);
console.log(md);
JS
