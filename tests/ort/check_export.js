// ONNX Runtime (onnxruntime-node, CPU) against latentllm on an `export --format onnx` directory:
//   node check_export.js CASE.json
// CASE.json (written by tests/golden/test_export_onnx.cpp): {"dir": export directory, "ids": [n] token ids,
// "logits": file of latentllm's float32 logits [n, V] of ids (one forward from position 0), "prefill":
// positions run in the first call of the cached pass, "prompt": [m] ids and "greedy": [k] tokens of
// `latentllm generate --temperature 0`, "tolerance": max |ORT − latentllm| allowed per logit}.
// Checks (1) one call over all of ids with an empty past, (2) prefill then one position per call through
// past_key_values / present, both against latentllm's logits at every position, and (3) greedy decoding
// with the KV cache, token by token against generate's; (4) when CASE.json has "ppl": {"windows": [[T ids],
// ...], "reference": `latentllm ppl`'s perplexity of them, "tolerance": relative}, the perplexity of the
// windows (each one call from position 0; exp of the mean NLL of every window's T − 1 predicted tokens,
// the protocol of src/eval) against the reference. Prints one JSON line; exits 1 on a failure.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const config = JSON.parse(fs.readFileSync(path.join(spec.dir, 'config.json'), 'utf8'));
const layers = config.latentllm_export.past_key_values;  // per layer: {key, value}: {form, rank}
const io16 = config.torch_dtype === 'float16';

// The empty past of each layer, as docs/FORMAT.md describes: dense [1, H_kv, 0, d_h], latent [1, 0, r].
function emptyPast() {
  const H = config.num_attention_heads;
  const Hkv = config.num_key_value_heads || H;
  const dh = config.head_dim || config.hidden_size / H;
  const feeds = {};
  layers.forEach((l, i) => {
    for (const part of ['key', 'value']) {
      const f = l[part];
      const dims = f.form === 'latent' ? [1, 0, f.rank] : [1, Hkv, 0, dh];
      feeds[`past_key_values.${i}.${part}`] = new ort.Tensor(io16 ? 'float16' : 'float32',
        io16 ? new Uint16Array(0) : new Float32Array(0), dims);
    }
  });
  return feeds;
}

const i64 = (a) => new ort.Tensor('int64', BigInt64Array.from(a.map(BigInt)), [1, a.length]);
const range = (a, b) => Array.from({ length: b - a }, (_, k) => a + k);

// Runs ids at positions past..past+n−1 over the cache `past` (feeds of past_key_values.*); returns the
// logits [n, V] as float32 rows and the presents as the next call's past.
async function step(session, ids, pastLen, past) {
  const feeds = Object.assign({
    input_ids: i64(ids),
    attention_mask: i64(new Array(pastLen + ids.length).fill(1)),
    position_ids: i64(range(pastLen, pastLen + ids.length)),
  }, past);
  const out = await session.run(feeds);
  const next = {};
  for (const name of Object.keys(out)) {
    if (name.startsWith('present.')) next[name.replace('present.', 'past_key_values.')] = out[name];
  }
  const V = out.logits.dims[2];
  let data = out.logits.data;
  if (io16) data = Float32Array.from(data, (h) => f16ToF32(h));
  const rows = [];
  for (let t = 0; t < ids.length; ++t) rows.push(data.subarray(t * V, (t + 1) * V));
  return { rows, past: next };
}

function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

const argmax = (row) => row.reduce((best, v, k) => (v > row[best] ? k : best), 0);

// −log softmax(row)[target], in double.
function nll(row, target) {
  let max = -Infinity;
  for (const v of row) max = Math.max(max, v);
  let sum = 0;
  for (const v of row) sum += Math.exp(v - max);
  return Math.log(sum) + max - row[target];
}

// Perplexity of the windows, each one call from position 0.
async function perplexity(session, windows) {
  let total = 0, count = 0;
  for (const w of windows) {
    const { rows } = await step(session, w, 0, emptyPast());
    for (let t = 0; t + 1 < w.length; ++t) {
      total += nll(rows[t], w[t + 1]);
      count += 1;
    }
  }
  return Math.exp(total / count);
}

async function main() {
  const session = await ort.InferenceSession.create(path.join(spec.dir, 'onnx', 'model.onnx'),
    { intraOpNumThreads: 1, interOpNumThreads: 1 });
  const ref = new Float32Array(fs.readFileSync(spec.logits).buffer.slice(0));
  const n = spec.ids.length, V = ref.length / n;
  const failures = [];
  const diff = (rows, first) => {
    let worst = 0;
    rows.forEach((row, t) => {
      for (let j = 0; j < V; ++j) worst = Math.max(worst, Math.abs(row[j] - ref[(first + t) * V + j]));
    });
    return worst;
  };
  // (1) every position in one call
  const full = await step(session, spec.ids, 0, emptyPast());
  const fullDiff = diff(full.rows, 0);
  if (!(fullDiff <= spec.tolerance)) failures.push(`one call: max |logit diff| ${fullDiff} > ${spec.tolerance}`);
  // (2) prefill, then one position per call through the cache
  let r = await step(session, spec.ids.slice(0, spec.prefill), 0, emptyPast());
  let cachedDiff = diff(r.rows, 0);
  for (let t = spec.prefill; t < n; ++t) {
    r = await step(session, [spec.ids[t]], t, r.past);
    cachedDiff = Math.max(cachedDiff, diff(r.rows, t));
  }
  if (!(cachedDiff <= spec.tolerance)) failures.push(`cached: max |logit diff| ${cachedDiff} > ${spec.tolerance}`);
  // (3) greedy decoding with the cache
  const tokens = [];
  r = await step(session, spec.prompt, 0, emptyPast());
  let len = spec.prompt.length;
  while (tokens.length < spec.greedy.length) {
    const next = argmax(r.rows[r.rows.length - 1]);
    tokens.push(next);
    if (tokens.length === spec.greedy.length) break;
    r = await step(session, [next], len, r.past);
    len += 1;
  }
  const same = tokens.every((t, k) => t === spec.greedy[k]);
  if (!same) failures.push(`greedy tokens ${JSON.stringify(tokens)} (expected ${JSON.stringify(spec.greedy)})`);
  // (4) perplexity
  const report = { positions: n, vocab: V, one_call_max_diff: fullDiff, cached_max_diff: cachedDiff,
    greedy_tokens: tokens.length, greedy_identical: same, ort: ort.env.versions.node };
  if (spec.ppl) {
    report.ppl = await perplexity(session, spec.ppl.windows);
    report.ppl_reference = spec.ppl.reference;
    report.ppl_rel_diff = Math.abs(report.ppl - spec.ppl.reference) / spec.ppl.reference;
    if (!(report.ppl_rel_diff <= spec.ppl.tolerance)) {
      failures.push(`perplexity ${report.ppl} against latentllm's ${spec.ppl.reference}: relative ${report.ppl_rel_diff} > ${spec.ppl.tolerance}`);
    }
  }
  report.failures = failures;
  console.log(JSON.stringify(report));
  process.exit(failures.length ? 1 : 0);
}

main().catch((e) => { console.error(`check_export.js: ${e.stack || e}`); process.exit(2); });
