// Continuous batching in `latentllm serve` with the official OpenAI client (npm openai), on a server whose
// --max-memory leaves a KV budget for exactly K requests of P positions: concurrent greedy requests give
// their sequential replies (also the same completion alone and beside three others), K + 1 requests of P
// positions at once all succeed with at most K running (the last one queued, not refused), and a client
// that aborts a stream mid-way frees its slot (then new requests are served). Usage:
// node check_serve_batch.mjs BASE_URL MODEL_ID K P. Prints one JSON report on stdout
// (tests/golden/test_serve.cpp compares the greedy text with `generate`); exits 1 with the failed check.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [base, model, kArg, pArg] = process.argv.slice(2);
const K = Number(kArg), P = Number(pArg);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0 });
const health = async () => (await fetch(`${base}/health`)).json();
const report = { health_start: await health() };

// K + 1 requests of P positions each (a token-id prompt of 3 + max_tokens − 1 cached positions): sequential
// replies first, then all at once. The budget holds K: the last waits in the queue and is served.
const big = (i) => ({ model, prompt: [[1, 403 + i, 407]], max_tokens: P - 2, temperature: 0 });
const sequential = [];
for (let i = 0; i <= K; ++i) sequential.push((await client.completions.create(big(i))).choices[0].text);
const before = await health();
const together = await Promise.all(Array.from({ length: K + 1 }, (_, i) => client.completions.create(big(i))));
assert.deepEqual(together.map((r) => r.choices[0].text), sequential);
for (const r of together) assert.equal(r.choices[0].finish_reason === "length" || r.choices[0].finish_reason === "stop", true);
const after = await health();
report.peak_running = after.peak_running;  // before any smaller request: the most the budget let run
report.peak_queued = after.peak_queued;
report.queued_before = before.peak_queued;

// The same greedy completion alone and beside three other concurrent requests.
const greedy = { model, prompt: "Once upon a time", max_tokens: 20, temperature: 0 };
const alone = (await client.completions.create(greedy)).choices[0].text;
const others = ["Lily", "Tom", "The cat"].map((p) => client.completions.create({ model, prompt: p, max_tokens: 12,
  temperature: 0 }));
const beside = await Promise.all([client.completions.create(greedy), ...others]);
assert.equal(beside[0].choices[0].text, alone);
report.greedy_text = alone;

// A client that aborts a stream after its first piece: its slot is freed (running back to 0) and new
// requests are served.
const stream = await client.completions.create({ model, prompt: [[1, 500, 407]], max_tokens: P - 2, temperature: 0,
  stream: true });
let pieces = 0;
for await (const chunk of stream) {
  if (chunk.choices[0].text) ++pieces;
  if (pieces >= 1) {
    stream.controller.abort();
    break;
  }
}
let h = await health();
for (let i = 0; i < 200 && (h.running > 0 || h.queued > 0); ++i) {
  await new Promise((r) => setTimeout(r, 50));
  h = await health();
}
assert.equal(h.running, 0);
const next = await client.completions.create({ model, prompt: "Lily", max_tokens: 4, temperature: 0 });
assert.equal(next.choices[0].finish_reason, "length");
report.abandoned = h.abandoned;
report.health_end = await health();
process.stdout.write(JSON.stringify(report) + "\n");
