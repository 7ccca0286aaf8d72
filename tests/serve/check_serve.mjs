// Drives `latentllm serve` with the official OpenAI client (npm openai): models, greedy completions,
// echo + logprobs as lm-eval's local-completions sends them, a streamed chat, concurrent requests, and
// bad requests answered with OpenAI's error objects. Usage: node check_serve.mjs BASE_URL MODEL_ID.
// Prints one JSON report on stdout (tests/golden/test_serve.cpp compares it with `generate` and `ppl`);
// exits 1 with the failed check on stderr.
import assert from "node:assert/strict";
import OpenAI from "openai";

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0 });
const report = {};

const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), [model]);

// Greedy completion.
const greedy = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
report.greedy_text = greedy.choices[0].text;
assert.equal(greedy.choices[0].finish_reason, "length");
assert.equal(greedy.usage.completion_tokens, 20);

// lm-eval's loglikelihood request: echo, logprobs 1, max_tokens 0 (and 1: the generated token is dropped
// by lm-eval's [ctxlen:-1]).
const scored = await client.completions.create({ model, prompt: "Once upon a time, there was a little girl.",
  max_tokens: 0, echo: true, logprobs: 1, temperature: 0 });
const lp = scored.choices[0].logprobs;
assert.equal(scored.choices[0].text, "Once upon a time, there was a little girl.");
assert.equal(lp.token_logprobs[0], null);
assert.equal(lp.tokens.join(""), scored.choices[0].text);
report.echo_logprobs = lp.token_logprobs;
report.echo_tokens = lp.tokens;
const one = await client.completions.create({ model, prompt: "Once upon a time, there was a little girl.",
  max_tokens: 1, echo: true, logprobs: 1, temperature: 0 });
assert.equal(one.choices[0].logprobs.token_logprobs.length, lp.token_logprobs.length + 1);
assert.deepEqual(one.choices[0].logprobs.token_logprobs.slice(0, -1), lp.token_logprobs);
// Token-id prompts (tokenized_requests) and a batch of prompts in one request.
const byIds = await client.completions.create({ model, prompt: [[1, 403, 407]], max_tokens: 3, temperature: 0 });
assert.equal(byIds.choices.length, 1);
const batch = await client.completions.create({ model, prompt: ["Lily", "Tom"], max_tokens: 3, temperature: 0 });
assert.deepEqual(batch.choices.map((c) => c.index), [0, 1]);

// Stop strings and seeded sampling.
const stopped = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 30, temperature: 0,
  stop: ["girl"] });
assert.equal(stopped.choices[0].finish_reason, "stop");
assert.ok(!stopped.choices[0].text.includes("girl"));
const s1 = await client.completions.create({ model, prompt: "Once", max_tokens: 12, temperature: 0.9, top_p: 0.9, seed: 7 });
const s2 = await client.completions.create({ model, prompt: "Once", max_tokens: 12, temperature: 0.9, top_p: 0.9, seed: 7 });
assert.equal(s1.choices[0].text, s2.choices[0].text);

// Streamed chat: the pieces concatenate to the non-streamed reply.
const messages = [{ role: "user", content: "Tell me a story." }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
let streamed = "";
let finish = null;
for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0,
  stream: true })) {
  streamed += chunk.choices[0].delta.content ?? "";
  finish = chunk.choices[0].finish_reason ?? finish;
}
assert.equal(streamed, chat.choices[0].message.content);
assert.equal(finish, "length");
report.chat_text = chat.choices[0].message.content;

// Concurrent requests give what they give alone.
const prompts = ["Lily", "Tom", "The cat", "One day"];
const alone = [];
for (const p of prompts) alone.push((await client.completions.create({ model, prompt: p, max_tokens: 8, temperature: 0 })).choices[0].text);
const together = await Promise.all(prompts.map((p) => client.completions.create({ model, prompt: p, max_tokens: 8, temperature: 0 })));
assert.deepEqual(together.map((r) => r.choices[0].text), alone);

// Bad requests: OpenAI's error objects with 400 / 404, and the server still answers afterwards.
async function status(fn) {
  try {
    await fn();
  } catch (e) {
    return { status: e.status, code: e.error?.code ?? null, type: e.error?.type ?? null };
  }
  return { status: 200 };
}
report.errors = {
  unknown_model: await status(() => client.completions.create({ model: "nope", prompt: "a" })),
  too_long: await status(() => client.completions.create({ model, prompt: "a", max_tokens: 100000 })),
  bad_type: await status(() => client.completions.create({ model, prompt: "a", temperature: "hot" })),
  negative: await status(() => client.completions.create({ model, prompt: "a", max_tokens: -1 })),
  no_messages: await status(() => client.chat.completions.create({ model, messages: [] })),
};
const raw = await fetch(`${base}/v1/completions`, { method: "POST", body: "{not json" });
report.errors.malformed = { status: raw.status, body: await raw.json() };
const missing = await fetch(`${base}/v1/nothing`);
report.errors.no_route = { status: missing.status };
assert.equal((await fetch(`${base}/health`)).status, 200);
process.stdout.write(JSON.stringify(report) + "\n");
