// Chat images through `latentllm serve` on a LLaVA checkpoint with the official OpenAI client (npm openai):
// an image_url content part with a base64 data URL (PNG, and the same image as JPEG when given), streamed
// and not, and the bad image requests answered with OpenAI's error objects (HTTP 400). Usage:
// node check_serve_llava.mjs CONFIG_JSON, the config {"servers": [{"base", "model"}, ...] (LLaVA
// checkpoints), "text": {"base", "model"} (a text-only one), "png": path, "jpeg": path or null, "prompt",
// "before" (a text before the image), "max_tokens",
// "too_many" (more images than the context holds)}. Prints one JSON report on stdout (tests/golden/test_serve.cpp compares the replies with
// `generate --image` and the messages with docs/ERRORS.md); exits 1 with the failed check on stderr.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const config = JSON.parse(process.argv[2]);
const dataUrl = (path, type) => `data:${type};base64,${readFileSync(path).toString("base64")}`;
const png = dataUrl(config.png, "image/png");
const client = (base) => new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0 });
const userMessage = (url, text = config.prompt) => [{ role: "user", content: [
  { type: "image_url", image_url: { url, detail: "low" } }, { type: "text", text }] }];

// OpenAI's error for a request: status, type and message (200 when it succeeds).
async function failure(fn) {
  try {
    await fn();
  } catch (e) {
    return { status: e.status, type: e.error?.type ?? null, message: e.error?.message ?? String(e) };
  }
  return { status: 200 };
}

// One LLaVA server: the reply to the image and the prompt, streamed and not.
async function replies({ base, model }) {
  const c = client(base);
  const ask = (url) => c.chat.completions.create({ model, messages: userMessage(url), max_tokens: config.max_tokens,
    temperature: 0 });
  const plain = await ask(png);
  let streamed = "";
  for await (const chunk of await c.chat.completions.create({ model, messages: userMessage(png),
    max_tokens: config.max_tokens, temperature: 0, stream: true })) streamed += chunk.choices[0].delta.content ?? "";
  assert.equal(streamed, plain.choices[0].message.content);
  const out = { text: plain.choices[0].message.content, prompt_tokens: plain.usage.prompt_tokens };
  if (config.jpeg) out.jpeg_text = (await ask(dataUrl(config.jpeg, "image/jpeg"))).choices[0].message.content;
  // The image after a text: in its place (a conversation mode) or first (llava-hf's templates).
  const after = await c.chat.completions.create({ model, max_tokens: config.max_tokens, temperature: 0, messages: [
    { role: "user", content: [{ type: "text", text: config.before }, { type: "image_url", image_url: { url: png } },
      { type: "text", text: config.prompt }] }] });
  out.text_after = after.choices[0].message.content;
  out.text_after_prompt_tokens = after.usage.prompt_tokens;
  // Text alone still works on a LLaVA checkpoint.
  const text = await c.chat.completions.create({ model, messages: [{ role: "user", content: config.prompt }],
    max_tokens: 4, temperature: 0 });
  assert.equal(typeof text.choices[0].message.content, "string");
  out.text_prompt_tokens = text.usage.prompt_tokens;
  return out;
}

const report = { servers: [] };
for (const s of config.servers) report.servers.push(await replies(s));

// Bad image requests: HTTP 400 with OpenAI's error object, and the server still answers.
const { base, model } = config.servers[0];
const c = client(base);
const chat = (messages) => () => c.chat.completions.create({ model, messages, max_tokens: 2 });
report.errors = {
  http_url: await failure(chat(userMessage("https://example.com/cat.png"))),
  not_base64: await failure(chat(userMessage("data:image/png;base64,iVBOR#w0KGgo="))),
  not_an_image: await failure(chat(userMessage(`data:image/png;base64,${Buffer.from("GIF89a....").toString("base64")}`))),
  truncated: await failure(chat(userMessage(png.slice(0, png.length / 2 - (png.length / 2) % 4)))),
  bad_part: await failure(chat([{ role: "user", content: [{ type: "input_audio", input_audio: {} }] }])),
  placeholder: await failure(chat(userMessage(png, "What is in <image>?"))),
  too_many: await failure(chat([{ role: "user", content: Array.from({ length: config.too_many },
    () => ({ type: "image_url", image_url: { url: "data:image/png;base64,not decoded" } })) }])),
  text_model: await failure(() => client(config.text.base).chat.completions.create({ model: config.text.model,
    messages: userMessage(png), max_tokens: 2 })),
};
assert.equal((await c.chat.completions.create({ model, messages: userMessage(png), max_tokens: 1 })).choices.length, 1);
process.stdout.write(JSON.stringify(report) + "\n");
