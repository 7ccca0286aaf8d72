// Decode speed of an `export --format onnx` directory in ONNX Runtime (onnxruntime-node, CPU), for
// bench/run_onnx.sh:   node bench_decode.js DIR THREADS PROMPT_IDS_JSON STEPS
// Prefills the prompt, then greedy-decodes STEPS tokens one position per call through the KV cache
// (past_key_values / present); prints {"prefill_s", "decode_steps", "decode_s", "decode_tokens_per_s"}.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const [dir, threads, promptJson, steps] = process.argv.slice(2);
const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
const prompt = JSON.parse(promptJson);
const i64 = (a) => new ort.Tensor('int64', BigInt64Array.from(a.map(BigInt)), [1, a.length]);

function emptyPast() {
  const H = config.num_attention_heads, Hkv = config.num_key_value_heads || H;
  const dh = config.head_dim || config.hidden_size / H;
  const feeds = {};
  config.latentllm_export.past_key_values.forEach((l, i) => {
    for (const part of ['key', 'value']) {
      const f = l[part];
      feeds[`past_key_values.${i}.${part}`] = new ort.Tensor('float32', new Float32Array(0),
        f.form === 'latent' ? [1, 0, f.rank] : [1, Hkv, 0, dh]);
    }
  });
  return feeds;
}

async function run(session, ids, pastLen, past) {
  const out = await session.run(Object.assign({
    input_ids: i64(ids), attention_mask: i64(new Array(pastLen + ids.length).fill(1)),
    position_ids: i64(Array.from({ length: ids.length }, (_, k) => pastLen + k)),
  }, past));
  const next = {};
  for (const k of Object.keys(out)) if (k.startsWith('present.')) next[k.replace('present.', 'past_key_values.')] = out[k];
  const V = out.logits.dims[2], last = out.logits.data.subarray((ids.length - 1) * V, ids.length * V);
  let best = 0;
  for (let j = 1; j < V; ++j) if (last[j] > last[best]) best = j;
  return { token: best, past: next };
}

async function main() {
  const session = await ort.InferenceSession.create(path.join(dir, 'onnx', 'model.onnx'),
    { intraOpNumThreads: Number(threads), interOpNumThreads: 1 });
  let t0 = process.hrtime.bigint();
  let r = await run(session, prompt, 0, emptyPast());
  const prefill = Number(process.hrtime.bigint() - t0) / 1e9;
  let len = prompt.length;
  t0 = process.hrtime.bigint();
  for (let s = 0; s < Number(steps); ++s) {
    r = await run(session, [r.token], len, r.past);
    len += 1;
  }
  const decode = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ prefill_s: prefill, decode_steps: Number(steps), decode_s: decode,
    decode_tokens_per_s: Number(steps) / decode, ort: ort.env.versions.node }));
}
main().catch((e) => { console.error(`bench_decode.js: ${e.stack || e}`); process.exit(1); });
