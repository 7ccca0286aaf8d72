#!/usr/bin/env bash
# The ONNX export of quantized checkpoints (com.microsoft::MatMulNBits) against the float export:
# (1) file sizes of `latentllm export --format onnx` (f32 and --dtype f16) for the 16-bit latent model, its
# 4-bit version (compress --bits 4 --group 32) and --method gptq --bits 4 --group 32, on stories260K and
# TinyStories-656K (trained fixtures) and on the random-weight opt-125m shape of tools/synth (with the dense
# float model and --method rtn there; speed only); (2) ONNX Runtime against latentllm on the fixtures'
# quantized exports (tests/golden/test_onnx_runtime.cpp's recorded logit differences and perplexities);
# (3) onnxruntime-node's greedy decode rate (tests/ort/bench_decode.js) of the opt-125m exports,
# interleaved rounds, one thread. Results: bench/results/onnx/nbits.{md,json}.
#   bench/run_onnx_nbits.sh          env: ROUNDS (3), STEPS (32), NBITS_BENCH_DIR (/tmp/latentllm-nbits-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
SHARED=${LATENTLLM_SHARED:-../shared}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-32}
W=${NBITS_BENCH_DIR:-/tmp/latentllm-nbits-bench}
TEXT="$SHARED/data/tinystories/TinyStories-valid.stories0001-0232.clean.txt"
PROMPT="Once upon a time there was a little robot who lived in a small town by the sea. Every morning it"
cmake --build "$BUILD" --target latentllm-cli latentllm-synth test_onnx_runtime >/dev/null
mkdir -p bench/results/onnx "$W"
trap 'rm -rf "$W"' EXIT
L="$BUILD/latentllm"

compress() {  # model out options...
  local model=$1 out=$2; shift 2
  "$L" compress --model "$model" "$@" --calib text --calib-data "$TEXT" --nsamples 4 --seqlen 64 -q --out "$out" >/dev/null
}
bytes() { du -cb "$1/onnx" | tail -1 | cut -f1; }

sizes="[]"
add_size() {  # model variant dir
  local f32 f16
  "$L" export --model "$3" --out "$3-f32" --format onnx -q 2>/dev/null
  "$L" export --model "$3" --out "$3-f16" --format onnx --dtype f16 -q 2>/dev/null
  f32=$(bytes "$3-f32"); f16=$(bytes "$3-f16")
  sizes=$(node -e "const s=$sizes; s.push({model: '$1', variant: '$2', f32: $f32, f16: $f16}); console.log(JSON.stringify(s))")
}

for m in stories260K/hf TinyStories-656K; do
  tag=${m%%/*}
  compress "$SHARED/models/$m" "$W/$tag-l16" --method latentllm --ratio 0.3 --dtype f16
  compress "$SHARED/models/$m" "$W/$tag-l4" --method latentllm --ratio 0.3 --bits 4 --group 32 --dtype f16
  compress "$SHARED/models/$m" "$W/$tag-g4" --method gptq --bits 4 --group 32 --dtype f16
  add_size "$tag" "latent 16-bit" "$W/$tag-l16"
  add_size "$tag" "latent 4-bit g32" "$W/$tag-l4"
  add_size "$tag" "gptq 4-bit g32" "$W/$tag-g4"
done

"$BUILD/tools/synth/latentllm-synth" --preset opt-125m --out "$W/opt" --tokenizers "$SHARED/data/tokenizers" --force >/dev/null 2>&1
compress "$W/opt" "$W/opt-l16" --method latentllm --ratio 0.3
compress "$W/opt" "$W/opt-l4" --method latentllm --ratio 0.3 --bits 4 --group 32
compress "$W/opt" "$W/opt-r4" --method rtn --bits 4 --group 32
add_size opt-125m "dense float" "$W/opt"
add_size opt-125m "latent 16-bit" "$W/opt-l16"
add_size opt-125m "latent 4-bit g32" "$W/opt-l4"
add_size opt-125m "rtn 4-bit g32" "$W/opt-r4"

LATENTLLM_REQUIRE_ORT=1 "$BUILD/tests/test_onnx_runtime" --gtest_filter='*Quantized*:*Gptq*:*MinMax*:*EightBit*' \
  --gtest_output="json:$W/ort.json" >/dev/null

ids=$("$L" generate --model "$W/opt" --prompt "$PROMPT" --max-new-tokens 1 --temperature 0 --json -q | sed -n '/^{/,$p' |
      node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>console.log(JSON.stringify(JSON.parse(s).prompt_tokens)))")
load_before=$(cut -d' ' -f1 /proc/loadavg)
runs="[]"
for r in $(seq "$ROUNDS"); do
  for v in opt opt-l16 opt-l4 opt-r4; do
    out=$(node tests/ort/bench_decode.js "$W/$v-f32" 1 "$ids" "$STEPS")
    runs=$(node -e "const r=$runs; r.push({round: $r, variant: '$v', ...$out}); console.log(JSON.stringify(r))")
  done
  echo "round $r done" >&2
done
load_after=$(cut -d' ' -f1 /proc/loadavg)

node - "$W/ort.json" "$sizes" "$runs" "$load_before" "$load_after" "$STEPS" <<'JS'
const fs = require('fs');
const [ortFile, sizesJson, runsJson, loadBefore, loadAfter, steps] = process.argv.slice(2);
const sizes = JSON.parse(sizesJson), runs = JSON.parse(runsJson);
const ort = JSON.parse(fs.readFileSync(ortFile, 'utf8')).testsuites[0].testsuite.map((t) => ({
  test: t.name, status: t.result, one_call_max_diff: t.one_call_max_diff, ppl_ort: t.ppl_ort,
  ppl_latentllm: t.ppl_latentllm, ppl_rel_diff: t.ppl_rel_diff }));
fs.writeFileSync('bench/results/onnx/nbits.json', JSON.stringify({ sizes, ort, runs, load_before: Number(loadBefore),
  load_after: Number(loadAfter), steps: Number(steps) }, null, 2) + '\n');
const f = (x, d = 3) => Number(x).toFixed(d);
let md = '# ONNX export of quantized checkpoints: MatMulNBits\n\n' +
  '`bench/run_onnx_nbits.sh`. `latentllm export --format onnx` writes each quantized matrix as one ' +
  '`com.microsoft::MatMulNBits` node over the checkpoint\'s codes, F16 scales and zero points ' +
  '(docs/QUANT.md "Exports").\n\n## File sizes\n\n' +
  'onnx/model.onnx (+ model.onnx_data), bytes. Ratios against the 16-bit latent model\'s export in the same ' +
  '`--dtype`, and (last column) the `--dtype f16` export against the 16-bit latent model\'s default f32 export. ' +
  'Latent: `--ratio 0.3`; compress `--dtype f16`.\n\n' +
  '| model | checkpoint | export f32 | export f16 | / latent 16-bit (f32) | / latent 16-bit (f16) | f16 / latent 16-bit f32 |\n' +
  '|---|---|---:|---:|---:|---:|---:|\n';
for (const s of sizes) {
  const base = sizes.find((x) => x.model === s.model && x.variant === 'latent 16-bit');
  md += `| ${s.model} | ${s.variant} | ${s.f32} | ${s.f16} | ${f(s.f32 / base.f32)} | ${f(s.f16 / base.f16)} | ${f(s.f16 / base.f32)} |\n`;
}
md += '\n## ONNX Runtime against latentllm\n\n' +
  'tests/golden/test_onnx_runtime.cpp (onnxruntime-node, CPU): max |logit difference| over one call of prompt + 24 ' +
  'greedy tokens, and perplexity of 4 windows of 128 tokens of the TinyStories text against `latentllm ppl` on the same ' +
  'windows; greedy tokens with the KV cache identical in every case (the test fails otherwise).\n\n' +
  '| test | result | max logit diff | ppl ORT | ppl latentllm | relative diff |\n|---|---|---:|---:|---:|---:|\n';
for (const o of ort) md += `| ${o.test} | ${o.status} | ${o.one_call_max_diff} | ${o.ppl_ort} | ${o.ppl_latentllm} | ${o.ppl_rel_diff} |\n`;
md += `\n## Decode rate (opt-125m shape, random weights)\n\n` +
  `onnxruntime-node, tests/ort/bench_decode.js, 1 thread, ${steps} greedy steps after the prompt, the f32 exports, ` +
  `interleaved rounds; 1-minute load average ${loadBefore} before, ${loadAfter} after (a shared 2-core machine).\n\n` +
  '| round | dense float | latent 16-bit | latent 4-bit | rtn 4-bit | latent 4-bit / latent 16-bit | rtn 4-bit / dense |\n' +
  '|---:|---:|---:|---:|---:|---:|---:|\n';
const rounds = [...new Set(runs.map((r) => r.round))];
for (const k of rounds) {
  const t = (v) => runs.find((r) => r.round === k && r.variant === v).decode_tokens_per_s;
  md += `| ${k} | ${f(t('opt'), 1)} | ${f(t('opt-l16'), 1)} | ${f(t('opt-l4'), 1)} | ${f(t('opt-r4'), 1)} | ` +
    `${f(t('opt-l4') / t('opt-l16'), 2)} | ${f(t('opt-r4') / t('opt'), 2)} |\n`;
}
// The hand-written reading of an earlier run stays (from its heading on).
const out = 'bench/results/onnx/nbits.md';
const old = fs.existsSync(out) ? fs.readFileSync(out, 'utf8') : '';
if (old.includes('\n## Reading')) md += old.slice(old.indexOf('\n## Reading'));
fs.writeFileSync(out, md);
console.log(md);
JS
